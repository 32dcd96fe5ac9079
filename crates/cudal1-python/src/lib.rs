//! Finding the Python interpreter that runs PyTorch code, and installing the Python packages
//! cudal1 ships.
//!
//! The main type is [`Interpreter`]: found from a typed [`PythonRequest`] (a flag, the
//! `CUDAL1_PYTHON` variable, an active virtual environment, a `.venv` in the working directory or
//! above it, then `python3` on `PATH`), probed once with a script embedded in this crate that
//! answers typed JSON. [`EmbeddedPackage::install`] writes an embedded package ([`RUNNER`],
//! python/cudal1_runner, or [`MODEL_WORKER`], python/cudal1_model) into a cache directory
//! keyed by its content hash and gives the `PYTHONPATH` to use.

mod embedded;
mod find;

pub use embedded::{EmbeddedPackage, MODEL_WORKER, RUNNER};
pub use find::{find_interpreter, Interpreter, Probe, PythonError, PythonRequest, Remedy, Source};
