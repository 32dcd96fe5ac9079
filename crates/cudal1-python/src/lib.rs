//! Finding the Python interpreter that runs PyTorch code, and installing the runner package.
//!
//! The main type is [`Interpreter`]: found from a typed [`PythonRequest`] (a flag, the
//! `CUDAL1_PYTHON` variable, an active virtual environment, a `.venv` in the working directory or
//! above it, then `python3` on `PATH`), probed once with a script embedded in this crate that
//! answers typed JSON. [`RunnerPackage`] writes the embedded runner (python/cudal1_runner) into a
//! cache directory keyed by its content hash and gives the `PYTHONPATH` to use.

mod find;
mod runner;

pub use find::{find_interpreter, Interpreter, Probe, PythonError, PythonRequest, Source};
pub use runner::RunnerPackage;
