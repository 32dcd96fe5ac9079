//! The evaluator: is a candidate correct, and how much faster is it than its reference?
//!
//! The main entry points are [`evaluate_one`] for a single candidate and [`Batch`] for many:
//! candidates that build extensions are compiled by a pool of CPU workers ahead of GPU time
//! ([`compile`]), a trusted [`ReferenceSession`] per task makes expected outputs and compares, each
//! candidate runs in its own sandboxed runner process, and timing interleaves blocks of reference
//! and candidate calls in random order ([`timing`]). Every candidate ends with one [`Evaluation`]
//! whose [`Verdict`] carries a readable reason; a crash, hang or hostile program is a verdict,
//! never an error of the evaluator. Only a failing reference is an error ([`ReferenceError`]).

pub mod bandwidth;
pub mod batch;
pub mod candidate;
pub mod compile;
pub mod cores;
pub mod correctness;
pub mod degenerate;
mod failure;
pub mod findings;
pub mod reference;
pub mod runner;
pub mod settings;
pub mod timing;
pub mod verdict;
pub mod window;

pub use batch::{evaluate_one, Batch, BatchEvent, BatchJob};
pub use compile::{CompileCache, CompileOutcome};
pub use reference::{ReferenceError, ReferenceSession};
pub use runner::RunnerEnv;
pub use settings::{Device, EvalSettings, TimingWindow, Tolerance};
pub use verdict::{Environment, Evaluation, Judgement, Measurements, Verdict, Warning};
