//! The evaluator: is a candidate correct, and how much faster is it than its reference?
//!
//! The main type is [`Evaluator`], the one engine every command drives ([`engine`]): jobs go in,
//! one ordered stream of events comes out. Candidates that build extensions are compiled by a
//! pool of CPU workers ahead of device time ([`compile`]), a trusted [`ReferenceSession`] per task
//! makes expected outputs and compares, each candidate runs in its own sandboxed runner process,
//! and timing interleaves blocks of reference and candidate calls in random order ([`timing`]).
//! Every candidate ends with one [`Evaluation`] whose [`Verdict`] carries a readable reason; a
//! crash, hang or hostile program is a verdict, never an error of the evaluator. Only a failing
//! reference is an error ([`ReferenceError`]): the task is at fault; and a machine that runs out
//! of memory under a candidate that was not the cause gives no verdict either
//! ([`candidate::Unjudged::Host`], [`JobOutcome::HostFailed`]).

pub mod bandwidth;
pub mod baseline;
pub mod candidate;
pub mod compile;
pub mod cores;
pub mod correctness;
pub mod degenerate;
pub mod engine;
mod failure;
pub mod findings;
pub mod intake;
pub mod judge;
pub mod memory;
pub mod own;
pub mod profile;
pub mod reference;
pub mod runner;
pub mod scratch;
pub mod settings;
pub mod timing;
pub mod verdict;
pub mod window;

pub use baseline::Baseline;
pub use compile::{CompileCache, CompileOutcome};
pub use engine::{
    default_lanes, hold_alone, Canceller, DeviceHold, Done, EngineConfig, EngineStats, Evaluator,
    Event, EventKind, Job, JobHandle, JobId, JobOutcome, MemoryBudget, MemoryWait, OutsideMemory,
    Work,
};
pub use judge::{gpu_class_of, judge_version, Judge, JUDGE_LOGIC};
pub use memory::{MemoryNeed, Remedy, TooLarge};
pub use reference::{ReferenceError, ReferenceSession};
pub use runner::RunnerEnv;
pub use settings::{
    Device, EvalSettings, Mode, TimingWindow, Tolerance, DEFAULT_DEVICE_OUTPUT_BYTES,
};
pub use verdict::{
    Environment, Evaluation, Judgement, Measurements, TritonWarmup, Verdict, Warning,
};
