//! [`run`]: a worker's loop. It keeps up to `ahead` jobs claimed (so the engine's compile pool
//! and prefetch have work while a device times), submits each to its engine, renews their leases,
//! and writes each outcome back as it arrives: a verdict, a recorded failure (the task's
//! reference failed, or the job cannot be run here), or, for jobs the engine cancelled, a release
//! that puts the job back for another worker.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};
use cudal1_eval::{
    Canceller, Done, EngineConfig, EvalSettings, Evaluation, Evaluator, Job, JobId, JobOutcome,
};
use cudal1_store::{Claim, ClaimedJob, Completion, JobQueue, NewProgram, Stage, StoreError};
use cudal1_task::{Candidate, Task};

use crate::artifact;

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The engine jobs run on; its settings are replaced by each job's (the device kept).
    pub engine: EngineConfig,
    /// Names the worker in the queue.
    pub name: String,
    /// The jobs it takes: those for its GPU class (`cpu` on the CPU) and this build's judging
    /// version ([`cudal1_eval::judge_version`]).
    pub gpu_class: String,
    pub stages: Vec<Stage>,
    /// How long a claimed job stays the worker's without a heartbeat.
    pub lease: Duration,
    /// Jobs held at once (claimed, compiling, waiting for a device, running).
    pub ahead: usize,
    /// Where tasks that arrive with jobs are written for the runners.
    pub task_root: PathBuf,
    /// Run jobs whose settings turn the sandbox off.
    pub allow_unsandboxed: bool,
    /// What this worker's builds depend on ([`crate::artifact::environment`]); builds shipped
    /// from a compile-stage worker are used only when they match.
    pub build_environment: String,
    /// Stop once no job has been claimable for this long.
    pub exit_when_idle: Option<Duration>,
}

impl WorkerConfig {
    /// A worker name unique across machines: host, process id and a random part.
    pub fn default_name() -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "host".into());
        format!("{host}:{}:{:04x}", std::process::id(), rand::random::<u16>())
    }
}

/// What a worker does, for its reporter.
#[derive(Debug)]
pub enum WorkerEvent<'a> {
    /// An engine started for a family of settings; cancel or kill it through this.
    EngineStarted {
        canceller: Canceller,
    },
    Claimed {
        job: &'a ClaimedJob,
    },
    /// A job ended here: `first` when its result was the one kept.
    Finished {
        job: i64,
        task: &'a str,
        verdict: Option<&'a str>,
        error: Option<&'a str>,
        first: bool,
    },
    /// A job went back to the queue unfinished.
    Released {
        job: i64,
    },
    /// The machine ran out of memory under a job: no verdict; its lease is left to run out, so
    /// that it comes back counted as an attempt.
    HostFailed {
        job: i64,
        error: &'a str,
    },
    /// Another worker may have taken a job whose lease ran out; the first result wins.
    LeaseLost {
        job: i64,
    },
    /// The queue could not be reached; the worker keeps trying.
    StoreProblem {
        error: &'a StoreError,
    },
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WorkerSummary {
    pub claimed: u64,
    /// Jobs ended with a verdict written first.
    pub evaluated: u64,
    /// Jobs ended with a recorded failure.
    pub failed: u64,
    /// Results that another worker had already written.
    pub discarded: u64,
    pub released: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot start the evaluation engine")]
    Engine(#[source] std::io::Error),
    #[error("{count} result(s) could not be written to the queue `{queue}`; their jobs will be run again elsewhere once their leases expire")]
    Unwritten {
        queue: String,
        count: usize,
        #[source]
        source: StoreError,
    },
}

struct InFlight {
    job: ClaimedJob,
    task: String,
}

struct Engine {
    evaluator: Evaluator,
    family: String,
}

struct State<'a> {
    queue: &'a dyn JobQueue,
    config: &'a WorkerConfig,
    engine: Option<Engine>,
    in_flight: HashMap<i64, InFlight>,
    by_engine: HashMap<JobId, i64>,
    done_tx: Sender<Done>,
    /// Outcomes not written yet (the queue was unreachable).
    unwritten: VecDeque<(i64, String, Completion)>,
    summary: WorkerSummary,
    last_error: Option<StoreError>,
}

/// Takes jobs until `stop` is set (then finishes what runs, gives back what waits, and returns),
/// or until the queue has had nothing claimable for `exit_when_idle`.
pub fn run(
    queue: &dyn JobQueue,
    config: &WorkerConfig,
    stop: &AtomicBool,
    on_event: &mut dyn FnMut(WorkerEvent<'_>),
) -> Result<WorkerSummary, WorkerError> {
    let signals = queue.subscribe();
    let (done_tx, done_rx) = unbounded();
    let mut s = State {
        queue,
        config,
        engine: None,
        in_flight: HashMap::new(),
        by_engine: HashMap::new(),
        done_tx,
        unwritten: VecDeque::new(),
        summary: WorkerSummary::default(),
        last_error: None,
    };
    let poll = (config.lease / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let beat_every = config.lease / 3;
    let mut last_beat = Instant::now();
    let mut idle_since = Instant::now();
    let mut stopping = false;
    loop {
        if stop.load(Ordering::SeqCst) && !stopping {
            stopping = true;
            // What waits in the engine comes back as cancelled and goes back to the queue.
            if let Some(e) = &s.engine {
                e.evaluator.cancel();
            }
        }
        s.flush(on_event);
        if stopping && s.in_flight.is_empty() {
            break;
        }
        if !stopping {
            match s.fill(on_event) {
                Ok(true) => idle_since = Instant::now(),
                Ok(false) => {}
                Err(e) => s.store_problem(e, on_event),
            }
        }
        if !s.in_flight.is_empty() {
            idle_since = Instant::now();
        }
        if let Some(limit) = config.exit_when_idle {
            if s.in_flight.is_empty() && s.unwritten.is_empty() && idle_since.elapsed() >= limit {
                break;
            }
        }
        if last_beat.elapsed() >= beat_every {
            s.heartbeat(on_event);
            last_beat = Instant::now();
        }
        wait(&done_rx, &signals, poll, &mut s, on_event);
    }
    if let Some(engine) = s.engine.take() {
        engine.finish();
    }
    if !s.unwritten.is_empty() {
        let source = s.last_error.take().unwrap_or_else(|| StoreError::Backend {
            store: queue.describe(),
            operation: "complete",
            source: "results left unwritten".into(),
        });
        return Err(WorkerError::Unwritten {
            queue: queue.describe(),
            count: s.unwritten.len(),
            source,
        });
    }
    Ok(s.summary)
}

/// Waits for an outcome, a queue signal or the poll interval.
fn wait(
    done_rx: &Receiver<Done>,
    signals: &Receiver<cudal1_store::QueueSignal>,
    poll: Duration,
    s: &mut State<'_>,
    on_event: &mut dyn FnMut(WorkerEvent<'_>),
) {
    select! {
        recv(done_rx) -> done => {
            if let Ok(done) = done {
                s.finished(done, on_event);
                // Take every outcome that is already there before claiming again.
                while let Ok(more) = done_rx.try_recv() {
                    s.finished(more, on_event);
                }
            }
        }
        recv(signals) -> _ => {
            // Any signal may mean claimable work; drain the rest.
            while signals.try_recv().is_ok() {}
        }
        default(poll) => {}
    }
}

impl Engine {
    fn finish(self) {
        self.evaluator.finish();
    }
}

impl State<'_> {
    /// Claims jobs while there is room; `true` when some were claimed.
    fn fill(&mut self, on_event: &mut dyn FnMut(WorkerEvent<'_>)) -> Result<bool, StoreError> {
        let mut claimed_any = false;
        while self.in_flight.len() < self.config.ahead.max(1) {
            // An idle worker takes one job of any family, then fills up with that family.
            let family = if self.in_flight.is_empty() {
                None
            } else {
                self.engine.as_ref().map(|e| e.family.clone())
            };
            let limit =
                if family.is_none() { 1 } else { self.config.ahead.max(1) - self.in_flight.len() };
            let claim = Claim {
                worker: self.config.name.clone(),
                gpu_class: self.config.gpu_class.clone(),
                judge: cudal1_eval::judge_version(),
                stages: self.config.stages.clone(),
                family,
                limit,
                lease: self.config.lease,
            };
            let jobs = self.queue.claim(&claim)?;
            if jobs.is_empty() {
                break;
            }
            claimed_any = true;
            for job in jobs {
                self.summary.claimed += 1;
                on_event(WorkerEvent::Claimed { job: &job });
                if let Err(failure) = self.start(job.clone(), on_event) {
                    self.write(job.id, job.task_name.clone(), failure, on_event);
                }
            }
        }
        Ok(claimed_any)
    }

    /// Hands a claimed job to the engine; `Err` with how it ends when it cannot run: failed when
    /// the job is at fault, unrunnable when this worker is (another may run it).
    fn start(
        &mut self,
        job: ClaimedJob,
        on_event: &mut dyn FnMut(WorkerEvent<'_>),
    ) -> Result<(), Completion> {
        let failed = |error: String| Completion::Failed { error };
        let unrunnable = |error: String| Completion::Unrunnable { error };
        let settings: EvalSettings = serde_json::from_value(job.settings.clone())
            .map_err(|e| failed(format!("this worker cannot read the job's settings (made by another version of cudal1?): {e}")))?;
        if settings.key_hash() != job.key.settings_hash {
            return Err(failed(
                "the job's settings do not hash to its key (made by another version of cudal1?)"
                    .into(),
            ));
        }
        if !settings.sandbox && !self.config.allow_unsandboxed {
            return Err(unrunnable(format!("worker `{}` runs no job without the sandbox, and this job asks to run without it (a worker that allows unsandboxed jobs can take it)", self.config.name)));
        }
        let device =
            self.config.engine.devices.first().cloned().unwrap_or(cudal1_eval::Device::Cpu);
        if settings.device.is_cuda() != device.is_cuda() {
            return Err(unrunnable(format!(
                "the job is for {}, but worker `{}` runs on {device}",
                settings.device, self.config.name
            )));
        }
        let task =
            Task::materialize(&self.config.task_root, &job.task_name, job.task_source.clone())
                .map_err(|e| failed(format!("the job's task: {e}")))?;
        if task.hash != job.key.task_hash {
            return Err(failed("the job's task source does not hash to its key".into()));
        }
        let candidate =
            Candidate::from_source(format!("job {}", job.id), job.candidate_source.clone());
        if candidate.hash != job.key.candidate_hash {
            return Err(failed("the job's code does not hash to its key".into()));
        }
        if let Some(a) = &job.artifact {
            artifact::install(
                &self.config.engine.compile_cache,
                &candidate,
                a,
                &self.config.build_environment,
            );
        }
        let family = crate::job::settings_family(&settings);
        self.ensure_engine(&settings, &family, on_event)
            .map_err(|e| unrunnable(format!("the engine could not start: {e}")))?;
        let engine = self.engine.as_ref().expect("started above");
        let id = engine.evaluator.submit_to(
            Job::evaluate(Arc::new(task), candidate).mode(settings.mode).priority(job.priority),
            &self.done_tx,
        );
        self.by_engine.insert(id, job.id);
        self.in_flight.insert(job.id, InFlight { task: job.task_name.clone(), job });
        Ok(())
    }

    /// An engine for this family of settings (started, or restarted when idle on another).
    fn ensure_engine(
        &mut self,
        settings: &EvalSettings,
        family: &str,
        on_event: &mut dyn FnMut(WorkerEvent<'_>),
    ) -> std::io::Result<()> {
        if self.engine.as_ref().is_some_and(|e| e.family == family) {
            return Ok(());
        }
        if let Some(old) = self.engine.take() {
            debug_assert!(self.in_flight.is_empty(), "an engine is replaced only when idle");
            old.finish();
        }
        let device =
            self.config.engine.devices.first().cloned().unwrap_or(cudal1_eval::Device::Cpu);
        // Its verdicts are filed under the class the worker takes jobs of (`--gpu-class`).
        let judge = cudal1_eval::Judge::new(self.config.gpu_class.clone());
        let config = EngineConfig {
            settings: EvalSettings { device, ..settings.clone() },
            judge,
            ..self.config.engine.clone()
        };
        // Outcomes arrive on `done_tx`; the event stream is not needed (dropping it is allowed).
        let evaluator = Evaluator::start(config)?;
        on_event(WorkerEvent::EngineStarted { canceller: evaluator.canceller() });
        self.engine = Some(Engine { evaluator, family: family.to_owned() });
        Ok(())
    }

    fn finished(&mut self, done: Done, on_event: &mut dyn FnMut(WorkerEvent<'_>)) {
        let Some(job_id) = self.by_engine.remove(&done.id) else { return };
        let Some(flight) = self.in_flight.remove(&job_id) else { return };
        let completion = match done.outcome {
            JobOutcome::Evaluated(e) => completion_of(&flight.job, &e),
            JobOutcome::TaskFailed { error, .. } => {
                Completion::Failed { error: format!("the task's reference failed: {error}") }
            }
            // The machine ran out of memory, not the candidate: no verdict. The job is not given
            // back (a release would not count the attempt, and a job that does this every time
            // would come back for ever): its lease runs out, it is queued again with this attempt
            // counted, and after `max_attempts` it fails with the reason.
            JobOutcome::HostFailed { error } => {
                on_event(WorkerEvent::HostFailed { job: job_id, error: &error });
                return;
            }
            JobOutcome::Cancelled => {
                if let Err(e) = self.queue.release(job_id, &self.config.name) {
                    // The lease expires and the job goes back anyway.
                    self.store_problem(e, on_event);
                }
                self.summary.released += 1;
                on_event(WorkerEvent::Released { job: job_id });
                return;
            }
            JobOutcome::Checked(_) | JobOutcome::Described(_) => Completion::Failed {
                error: "the engine answered an evaluation with something else".into(),
            },
        };
        self.write(job_id, flight.task, completion, on_event);
    }

    fn write(
        &mut self,
        id: i64,
        task: String,
        completion: Completion,
        on_event: &mut dyn FnMut(WorkerEvent<'_>),
    ) {
        self.unwritten.push_back((id, task, completion));
        self.flush(on_event);
    }

    /// Writes what waits to be written, oldest first, until the queue fails.
    fn flush(&mut self, on_event: &mut dyn FnMut(WorkerEvent<'_>)) {
        while let Some((id, task, completion)) = self.unwritten.pop_front() {
            match self.queue.complete(id, &self.config.name, &completion) {
                Ok(first) => {
                    let (verdict, error) = match &completion {
                        Completion::Evaluated { verdict, .. } => (Some(verdict.as_str()), None),
                        Completion::Failed { error } | Completion::Unrunnable { error } => {
                            (None, Some(error.as_str()))
                        }
                    };
                    match (first, error) {
                        (false, _) => self.summary.discarded += 1,
                        (true, None) => self.summary.evaluated += 1,
                        (true, Some(_)) => self.summary.failed += 1,
                    }
                    on_event(WorkerEvent::Finished { job: id, task: &task, verdict, error, first });
                }
                Err(e) => {
                    self.unwritten.push_front((id, task, completion));
                    self.store_problem(e, on_event);
                    return;
                }
            }
        }
    }

    fn heartbeat(&mut self, on_event: &mut dyn FnMut(WorkerEvent<'_>)) {
        if self.in_flight.is_empty() {
            return;
        }
        let ids: Vec<i64> = self.in_flight.keys().copied().collect();
        match self.queue.heartbeat(&self.config.name, &ids, self.config.lease) {
            Ok(held) => {
                for id in ids.iter().filter(|id| !held.contains(id)) {
                    on_event(WorkerEvent::LeaseLost { job: *id });
                }
            }
            Err(e) => self.store_problem(e, on_event),
        }
    }

    fn store_problem(&mut self, e: StoreError, on_event: &mut dyn FnMut(WorkerEvent<'_>)) {
        on_event(WorkerEvent::StoreProblem { error: &e });
        self.last_error = Some(e);
    }
}

/// The job's verdict, and its program for the program database.
fn completion_of(job: &ClaimedJob, e: &Evaluation) -> Completion {
    let finite = |x: f64| Some(x).filter(|x| !x.is_nan());
    let evaluation = serde_json::to_value(e).expect("an evaluation is plain data");
    let program = NewProgram {
        key: job.program_key.clone(),
        code: job.candidate_source.clone(),
        run_id: "serve".into(),
        round: 0,
        trajectory: None,
        turn: 1,
        parent_ids: job.parent_ids.clone(),
        verdict: e.verdict.as_str().to_owned(),
        reason: e.reason.clone(),
        reason_class: e.reason_class.clone(),
        speedup_median: e.speedup.and_then(|s| finite(s.median)),
        speedup_ci_low: e.speedup.and_then(|s| finite(s.ci_low)),
        speedup_ci_high: e.speedup.and_then(|s| finite(s.ci_high)),
        evaluation: evaluation.clone(),
    };
    Completion::Evaluated {
        evaluation,
        verdict: e.verdict.as_str().to_owned(),
        program: Some(program),
    }
}
