//! [`run_compile_stage`]: a worker on a machine without a GPU that takes the compile stage of
//! jobs whose programs build extensions. It builds each in a sandboxed CPU process (the engine's
//! own `compile`), ships a finished build with the job, and moves the job on to the run stage.
//! A build that fails here is not a verdict (this machine may lack what the GPU machine has):
//! the job moves on without a build, and the GPU machine builds and judges it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;
use cudal1_eval::{compile::compile, CompileCache, CompileOutcome, EvalSettings, RunnerEnv};
use cudal1_store::{Artifact, Claim, ClaimedJob, JobQueue, Stage};
use cudal1_task::{Candidate, Task};

use crate::artifact;

#[derive(Debug, Clone)]
pub struct CompileStageConfig {
    pub name: String,
    /// The GPU class whose jobs it builds for.
    pub gpu_class: String,
    pub env: RunnerEnv,
    pub compile_cache: CompileCache,
    /// Builds at once.
    pub workers: usize,
    pub lease: Duration,
    pub task_root: PathBuf,
    /// Where builds run (a scratch directory).
    pub work_root: PathBuf,
    pub build_environment: String,
    pub exit_when_idle: Option<Duration>,
}

/// What a compile-stage worker did with a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Built {
    /// The build travels with the job.
    Shipped { bytes: usize },
    /// No build travels: it failed here, or the program needed none.
    NotShipped { why: String },
}

/// Builds until `stop` is set or nothing was claimable for `exit_when_idle`; returns how many
/// jobs moved on.
pub fn run_compile_stage(
    queue: &dyn JobQueue,
    config: &CompileStageConfig,
    stop: &AtomicBool,
    on_built: &(dyn Fn(&ClaimedJob, &Built) + Sync),
) -> u64 {
    let last_work = Mutex::new(Instant::now());
    let moved = std::sync::atomic::AtomicU64::new(0);
    let signals = queue.subscribe();
    std::thread::scope(|s| {
        for _ in 0..config.workers.max(1) {
            s.spawn(|| loop {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let claim = Claim {
                    worker: config.name.clone(),
                    gpu_class: config.gpu_class.clone(),
                    judge: cudal1_eval::judge_version(),
                    stages: vec![Stage::Compile],
                    family: None,
                    limit: 1,
                    lease: config.lease,
                };
                let job = match queue.claim(&claim) {
                    Ok(mut jobs) => jobs.pop(),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot claim compile jobs; retrying");
                        None
                    }
                };
                let Some(job) = job else {
                    let idle_for = last_work.lock().unwrap_or_else(std::sync::PoisonError::into_inner).elapsed();
                    if config.exit_when_idle.is_some_and(|limit| idle_for >= limit) {
                        return;
                    }
                    let _ = signals.recv_timeout(Duration::from_millis(500));
                    continue;
                };
                let built = build_with_heartbeats(queue, config, &job);
                let artifact = built.as_ref().ok();
                match queue.advance(job.id, &config.name, artifact) {
                    Ok(()) => {
                        moved.fetch_add(1, Ordering::SeqCst);
                        let report = match &built {
                            Ok(a) => Built::Shipped { bytes: a.archive.len() },
                            Err(why) => Built::NotShipped { why: why.clone() },
                        };
                        on_built(&job, &report);
                    }
                    Err(e) => tracing::warn!(job = job.id, error = %e, "could not move a built job on; its lease will expire"),
                }
                *last_work.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
            });
        }
    });
    moved.load(Ordering::SeqCst)
}

/// Builds the job's program while renewing its lease.
fn build_with_heartbeats(
    queue: &dyn JobQueue,
    config: &CompileStageConfig,
    job: &ClaimedJob,
) -> Result<Artifact, String> {
    let (done_tx, done_rx) = bounded::<()>(1);
    std::thread::scope(|s| {
        s.spawn(|| {
            while done_rx.recv_timeout(config.lease / 3).is_err() {
                if let Err(e) = queue.heartbeat(&config.name, &[job.id], config.lease) {
                    tracing::warn!(job = job.id, error = %e, "heartbeat failed");
                }
            }
        });
        let result = build(config, job);
        let _ = done_tx.send(());
        result
    })
}

fn build(config: &CompileStageConfig, job: &ClaimedJob) -> Result<Artifact, String> {
    let settings: EvalSettings = serde_json::from_value(job.settings.clone())
        .map_err(|e| format!("unreadable settings: {e}"))?;
    let task = Task::materialize(&config.task_root, &job.task_name, job.task_source.clone())
        .map_err(|e| e.to_string())?;
    let candidate = Candidate::from_source(format!("job {}", job.id), job.candidate_source.clone());
    std::fs::create_dir_all(&config.work_root).map_err(|e| e.to_string())?;
    match compile(
        &config.env,
        &task,
        &candidate,
        &config.compile_cache,
        &EvalSettings { device: cudal1_eval::Device::Cpu, ..settings },
        &config.work_root,
    ) {
        CompileOutcome::Built { dir, .. } => {
            let archive = artifact::pack(&dir).map_err(|e| format!("packing the build: {e}"))?;
            Ok(Artifact { environment: config.build_environment.clone(), archive })
        }
        CompileOutcome::Failed { judgement, .. } => {
            Err(format!("the build failed here: {}", judgement.reason.lines().next().unwrap_or("")))
        }
        CompileOutcome::NotNeeded => Err("the program builds no extension".into()),
    }
}
