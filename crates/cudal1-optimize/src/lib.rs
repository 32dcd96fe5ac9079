//! The optimize loop of cudal1. The main type is [`Optimizer`]: given an LLM ([`cudal1_llm::Llm`]),
//! prompt templates, the store and the evaluation engine ([`cudal1_eval::Evaluator`]), [`Optimizer::run`] runs rounds of samples for one
//! task. Round 1 shows the LLM the reference alone; later rounds show it up to N earlier correct
//! variants with their measured speedups, drawn from the task's program database by CUDA-L1's
//! bucketed softmax. Replies are parsed as they arrive, each new program is evaluated while the
//! LLM still writes others, and a program seen before (same normalised source) is never
//! evaluated twice. With [`OptimizeConfig::turns`] above 1 each sample slot is a trajectory:
//! once a turn's program is judged, the next turn's prompt shows it with its verdict and reason
//! (the compiler's errors, the mismatch, the speedup), until a turn is correct and fast enough or
//! the trajectory has its K programs. Every sample, program and finished round goes to the store
//! at once, so an interrupted run resumes where it stopped, trajectories from their last turn. The run ends after its rounds, on a wall-time,
//! token or cost budget, or after K rounds without a better program; [`write_outputs`] then
//! leaves `best.py`, `best.json` and `report.md` in a directory (a non-CUDA run in a folder of
//! its language's name inside it, [`language_dir`]).
//!
//! ```no_run
//! # fn demo(opt: &cudal1_optimize::Optimizer<'_>, task: &cudal1_task::Task) -> Result<(), cudal1_optimize::OptimizeError> {
//! let summary = opt.run(task, "runs/diag", &mut |event| tracing::info!(?event))?;
//! cudal1_optimize::write_outputs(std::path::Path::new("runs/diag"), &summary)?;
//! println!("{}: best {:?}", summary.stop_text, summary.best.map(|b| b.speedup));
//! # Ok(()) }
//! ```

mod config;
mod error;
mod event;
mod feedback;
mod generate;
mod lineage;
mod output;
mod plan;
mod run;
mod stop;
mod summary;
mod tally;
mod turns;

pub use config::OptimizeConfig;
pub use error::OptimizeError;
pub use event::Event;
pub use feedback::judged;
pub use lineage::LineageNode;
pub use output::{language_dir, render_report, write_outputs, OutputFiles};
pub use plan::PromptKind;
pub use run::{run_id, Optimizer, Profiles};
pub use stop::StopReason;
pub use summary::{BestProgram, Invocation, RunSummary, SampleLine, Totals};
pub use tally::Outcome;
pub use turns::{trajectory_id, TrajectoryState};
