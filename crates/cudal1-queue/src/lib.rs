//! Evaluation jobs through a shared queue, so that many processes on many machines judge the
//! candidates one service receives. The main function is [`run`], a worker: it takes jobs from a
//! [`cudal1_store::JobQueue`] (SQLite on one machine, PostgreSQL across machines) under a lease it
//! renews, judges them with its own [`cudal1_eval::Evaluator`], and writes each verdict back (the
//! first result wins); what it cannot finish goes back to the queue. [`JobSpec`] makes a job the
//! same way for every producer. [`run_compile_stage`] is the worker of machines without a GPU:
//! it builds the extensions of queued programs and ships the builds with their jobs.
//!
//! ```no_run
//! # fn demo(queue: &dyn cudal1_store::JobQueue, config: &cudal1_queue::WorkerConfig) -> Result<(), cudal1_queue::WorkerError> {
//! let stop = std::sync::atomic::AtomicBool::new(false);
//! let summary = cudal1_queue::run(queue, config, &stop, &mut |event| tracing::info!(?event))?;
//! println!("{} evaluated, {} given back", summary.evaluated, summary.released);
//! # Ok(()) }
//! ```

pub mod artifact;
mod compile_stage;
mod job;
mod worker;

pub use compile_stage::{run_compile_stage, Built, CompileStageConfig};
pub use cudal1_eval::gpu_class_of;
pub use job::{settings_family, JobSpec};
pub use worker::{run, WorkerConfig, WorkerError, WorkerEvent, WorkerSummary};
