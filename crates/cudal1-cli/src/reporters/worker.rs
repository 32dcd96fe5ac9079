use cudal1_queue::WorkerEvent;

/// A queue worker's events (`cudal1 worker`, and `serve`'s local worker): warnings always, a
/// line per job with `--progress`, the rest in the log (`-v`).
pub struct WorkerReporter {
    /// A line per job claimed, finished and given back.
    pub per_job: bool,
}

impl WorkerReporter {
    /// Reports `event`; hands an engine's canceller to `watch` (Ctrl-C cancels its jobs).
    pub fn event(&self, event: WorkerEvent<'_>, watch: impl FnOnce(cudal1_eval::Canceller)) {
        match event {
            WorkerEvent::EngineStarted { canceller } => watch(canceller),
            WorkerEvent::Claimed { job } if self.per_job => eprintln!(
                "job {} ({}): claimed, attempt {}",
                job.id, job.task_name, job.attempt
            ),
            WorkerEvent::Finished { job, task, verdict, error, first } if self.per_job => {
                let what = verdict
                    .map_or_else(|| format!("failed: {}", error.unwrap_or("")), str::to_owned);
                let kept =
                    if first { "" } else { " (another worker's result came first; dropped)" };
                eprintln!("job {job} ({task}): {what}{kept}");
            }
            WorkerEvent::Finished { job, task, verdict, error, .. } => {
                tracing::info!(job, task, verdict, error, "judged");
            }
            WorkerEvent::Released { job } if self.per_job => {
                eprintln!("job {job}: given back to the queue");
            }
            WorkerEvent::HostFailed { job, error } => eprintln!(
                "warning: job {job}: no verdict, the machine failed, not the candidate ({error}); it comes back when its lease runs out"
            ),
            WorkerEvent::LeaseLost { job } => eprintln!(
                "warning: job {job}: its lease ran out; another worker may take it (the first result wins)"
            ),
            WorkerEvent::StoreProblem { error } => eprintln!("warning: the queue: {error}"),
            _ => {}
        }
    }
}
