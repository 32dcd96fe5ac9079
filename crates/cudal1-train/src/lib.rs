//! CUDA-L1's three training stages, driven from Rust with the policy in the model worker
//! ([`Policy`], python/cudal1_model) and every evaluation through the one evaluation engine
//! ([`cudal1_eval::Evaluator`]).
//!
//! - Stage 1, supervised data and fine-tuning ([`data`], [`sft`]): candidates sampled from LLM
//!   endpoints or taken from a corpus, kept when the evaluator finds them correct, de-duplicated by
//!   normalised source; then fine-tuning on them with the chat template.
//! - Stage 2, self-supervised rounds ([`selfsup`]): the policy samples, the evaluator keeps the
//!   correct programs not seen before, the policy is fine-tuned on them with a replay of stage 1.
//! - Stage 3, contrastive RL ([`grpo`], [`kernels`]): GRPO whose prompts show earlier variants of
//!   the task with their measured speedups, rewards from the evaluator's speedups.
//!
//! Multi-turn reward accounting ([`turns`]): a turn's reward counts the discounted scores of the
//! turns after it (Kevin), and advantages compare each turn with the same turn of the group.
//!
//! Rewards, advantages, the exemplar database, data order, checkpoints and metrics all live here;
//! the worker does tensor work only. Every stage writes a [`run::RunDir`] that resumes at the last
//! committed step after Ctrl-C or a crash.

pub mod ablation;
pub mod data;
mod error;
pub mod grpo;
pub mod heldout;
pub mod kernels;
mod plot;
pub mod policy;
pub mod run;
pub mod selfsup;
pub mod sft;
pub mod turns;

pub use error::TrainError;
pub use policy::{Limits, Peaks, Policy, PolicySpec, Sampling};

/// What a stage reports while it runs; the CLI turns these into progress bars and log lines.
#[derive(Debug, Clone)]
pub enum TrainEvent {
    Resumed {
        step: u64,
    },
    StepStarted {
        step: u64,
        of: u64,
    },
    Phase {
        step: u64,
        phase: &'static str,
    },
    StepFinished {
        step: u64,
        metrics: serde_json::Value,
    },
    Committed {
        step: u64,
    },
    /// Progress inside a long phase (samples collected, programs judged).
    Progress {
        done: usize,
        of: usize,
        what: &'static str,
    },
    /// Work of an interrupted run is used again (`what` says which).
    Reused {
        what: String,
    },
}
