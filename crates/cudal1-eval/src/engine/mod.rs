//! The evaluation engine: [`Evaluator`] is owned and long-lived. Jobs go in at any time
//! ([`Evaluator::submit`]: a task, a candidate, a [`Mode`], a priority); each job's [`JobOutcome`]
//! is awaited on its [`JobHandle`] (or a shared [`Done`] channel). The ordered stream of
//! [`Event`]s is opt-in ([`Evaluator::start_with_events`]): an engine started with
//! [`Evaluator::start`] keeps no events, so no user can hold a stream it never reads while every
//! event of a long run piles up in it.
//!
//! Inside, programs that build extensions go to a pool of sandboxed CPU compile workers first, so
//! a device never waits for nvcc. Each device has lanes: lane 0 takes every job and times one
//! full evaluation at a time with the device to itself; further lanes take only jobs that do not
//! time (correctness checks, task checks), which share the device with each other but never run
//! beside a timed one ([`gate`]). A GPU's gate is the process's, shared by every engine and by
//! what runs on the GPU besides evaluations ([`hold_alone`]: a profile). Each lane keeps the references of its last few tasks alive,
//! removes expected outputs after every job, and on GPUs starts the next candidates' processes
//! while the current one is timed. The engine owns its scratch directory and removes it when it
//! ends. `eval`, `optimize`, `tasks check`, `train` and `serve` are all users of this one loop.
//!
//! ```no_run
//! # fn demo(config: cudal1_eval::EngineConfig, task: cudal1_task::Task, candidate: cudal1_task::Candidate) -> std::io::Result<()> {
//! use cudal1_eval::{Evaluator, Job, JobOutcome};
//! let (engine, events) = Evaluator::start_with_events(config)?;
//! let handle = engine.submit(Job::evaluate(std::sync::Arc::new(task), candidate));
//! std::thread::spawn(move || events.iter().for_each(|e| tracing::debug!(?e)));
//! if let JobOutcome::Evaluated(e) = handle.wait() {
//!     println!("{}: {}", e.verdict, e.reason);
//! }
//! engine.finish();
//! # Ok(()) }
//! ```

mod admission;
mod gate;
mod job;
mod lane;
mod queue;
mod sizer;

pub use admission::{MemoryBudget, MemoryWait};
pub use gate::{hold_alone, DeviceHold};
pub use job::{Done, Event, EventKind, Job, JobHandle, JobId, JobOutcome, Work};

use crate::compile::{compile_until, needs_compile, CompileCache, CompileOutcome};
use crate::judge::Judge;
use crate::memory::{Footprint, MemoryNeed, DEVICE_OVERHEAD};
use crate::runner::RunnerEnv;
use crate::settings::{Device, EvalSettings, Mode};
use admission::Admission;
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use gate::DeviceSlot;
use queue::Queue;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Everything an engine is built from, resolved once by its user.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub env: RunnerEnv,
    /// One timing slot each; every job may run on any of them.
    pub devices: Vec<Device>,
    /// The settings of every job; the device and mode are set per job.
    pub settings: EvalSettings,
    pub compile_cache: CompileCache,
    /// Where the engine makes its scratch directory ([`crate::scratch::default_parent`]).
    pub scratch_parent: PathBuf,
    pub compile_workers: usize,
    /// Lanes per device: how many jobs that do not time may run on one device at once.
    pub lanes: usize,
    /// Start the next candidates' processes while one is timed; `None`: on GPUs only, since on
    /// the CPU the start-up would take a core from the timed processes.
    pub prefetch: Option<bool>,
    /// Seeds the engine's random choices (input seeds, block order).
    pub seed: u64,
    /// Every lane takes timed jobs too: a job loads its candidate and checks its outputs while it
    /// shares the device (beside other lanes' checks), and holds the device alone only to time
    /// it. Off: a timed job holds the device alone from its start, on one lane per device.
    pub pipeline: bool,
    /// Who judges: this build's judging version and the devices' class, recorded in every
    /// evaluation ([`Evaluation::judge`](crate::Evaluation)). [`EngineConfig::new`] names the
    /// class from the runner's GPU names (`cuda-unnamed` where torch gave none); a worker that
    /// takes jobs of a named class sets it.
    pub judge: Judge,
    /// Where jobs must fit ([`MemoryBudget`]): a lane starts a job only when its memory need fits
    /// beside what the running jobs reserved. [`EngineConfig::new`] takes the host's available
    /// memory at the time and leaves the devices' unknown; the CLI names the GPUs' from PyTorch.
    pub memory: MemoryBudget,
}

impl EngineConfig {
    /// The defaults for these devices: half the cores compile, scratch where
    /// [`crate::scratch::default_parent`] says, lanes as [`default_lanes`] says.
    pub fn new(
        env: RunnerEnv,
        devices: Vec<Device>,
        settings: EvalSettings,
        compile_cache: CompileCache,
    ) -> EngineConfig {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let lanes = default_lanes(devices.first().unwrap_or(&Device::Cpu), cores, devices.len());
        let memory = MemoryBudget {
            host: crate::scratch::available_memory(),
            devices: vec![None; devices.len()],
        };
        let judge = Judge::new(
            crate::judge::devices_class(&devices, &env.gpu_names)
                .unwrap_or_else(|_| "cuda-unnamed".into()),
        );
        EngineConfig {
            env,
            devices,
            settings,
            compile_cache,
            scratch_parent: crate::scratch::default_parent(),
            compile_workers: (cores / 2).max(1),
            lanes,
            prefetch: None,
            seed: rand::random(),
            pipeline: false,
            memory,
            judge,
        }
    }
}

/// Lanes per device by default. On a GPU, a check's time goes mostly to its processes' start-up
/// and loads on the CPU, not to the device: about one lane per 2.7 of the device's share of the
/// cores, from 2 to 8 (6 for an H100 with 16 cores: 120 checks a minute, where 8 lanes gave 111
/// and 12 gave 83, docs/bench/2026-11-25-gpu-session13). On the CPU one per two cores (a check
/// runs a reference and a candidate process).
///
/// ```
/// use cudal1_eval::{default_lanes, Device};
/// assert_eq!(default_lanes(&Device::Cuda(0), 16, 1), 6);
/// assert_eq!(default_lanes(&Device::Cuda(0), 128, 8), 6);
/// assert_eq!(default_lanes(&Device::Cuda(0), 4, 1), 2);
/// assert_eq!(default_lanes(&Device::Cpu, 2, 1), 1);
/// ```
pub fn default_lanes(device: &Device, cores: usize, devices: usize) -> usize {
    if device.is_cuda() {
        (cores / devices.max(1) * 3 / 8).clamp(2, 8)
    } else {
        (cores / 2).max(1)
    }
}

/// Where the engine's time went, for throughput reports.
#[derive(Debug, Clone)]
pub struct EngineStats {
    /// Since the engine started.
    pub wall: Duration,
    /// Per device: how long a timed job held it alone.
    pub timing_busy: Vec<(Device, Duration)>,
    /// Reference processes started, and tasks loaded into a kept reference's process instead
    /// (checks that are not timed, [`lane`]).
    pub references_started: usize,
    pub references_reused: usize,
}

/// Where a job's outcome goes besides the event stream.
enum Reply {
    Handle(Sender<JobOutcome>),
    Queue(Sender<Done>),
}

/// A job inside the engine.
struct Entry {
    id: JobId,
    job: Job,
    reply: Reply,
    submitted: Instant,
    compiled: CompileOutcome,
    /// Wall time in the compile pool.
    compile_wall: Duration,
}

struct Shared {
    config: EngineConfig,
    scratch: PathBuf,
    compile_q: Queue<Entry>,
    ready_q: Queue<Entry>,
    gates: Vec<DeviceSlot>,
    admission: Admission,
    /// Tasks sized on meta tensors for admission, by [`Shared::sizing_key`] (`None`: it could not
    /// be sized so).
    footprints: Mutex<HashMap<String, Option<Footprint>>>,
    /// Tasks asked of the sizing thread ([`sizer`]) and not sized yet.
    sizing: sizer::Pending,
    /// The most a task's reference process was seen to hold (on its device, and on the host), by
    /// task hash.
    seen: Mutex<HashMap<String, MemoryNeed>>,
    /// The event stream's sender, when the user asked for one.
    events: Option<Sender<Event>>,
    cancelled: AtomicBool,
    killed: AtomicBool,
    next_id: AtomicU64,
    compilers_alive: AtomicUsize,
    started: Instant,
    references_started: AtomicUsize,
    references_reused: AtomicUsize,
}

impl Shared {
    fn emit(&self, job: JobId, kind: EventKind) {
        // A user that dropped the stream does not want events.
        if let Some(events) = &self.events {
            let _ = events.send(Event { job, kind });
        }
    }

    fn end(&self, entry: Entry, outcome: JobOutcome) {
        // A waiter that went away does not want the outcome.
        let _ = match entry.reply {
            Reply::Handle(tx) => tx.send(outcome.clone()).is_ok(),
            Reply::Queue(tx) => tx.send(Done { id: entry.id, outcome: outcome.clone() }).is_ok(),
        };
        self.emit(entry.id, EventKind::Finished(outcome));
    }

    fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Where a task's footprint is kept: sizes depend on the task and its scale only.
    fn sizing_key(task: &cudal1_task::Task, settings: &EvalSettings) -> String {
        format!("{}:{:?}", task.hash, settings.scale)
    }

    /// Whether jobs wait for memory: only then are tasks sized.
    fn admits_by_memory(&self) -> bool {
        let m = &self.config.memory;
        m.host.is_some() || m.devices.iter().any(Option::is_some)
    }

    fn ready(&self, entry: Entry) {
        let priority = entry.job.priority;
        if let Err(entry) = self.ready_q.push(priority, entry) {
            self.end(entry, JobOutcome::Cancelled);
        }
    }
}

/// The engine. Dropping it without [`Evaluator::finish`] stops everything at once.
pub struct Evaluator {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    scratch: Option<tempfile::TempDir>,
    /// Tasks to size ahead of their jobs ([`sizer`]), where jobs are admitted by memory.
    asks: Option<sizer::Asks>,
    /// Held while the engine lives, so that another engine's start does not take its scratch
    /// directory for one left behind ([`crate::scratch::sweep`]).
    _owner: nix::fcntl::Flock<std::fs::File>,
}

impl Evaluator {
    /// Starts the compile pool and the device lanes, with no event stream: outcomes come on the
    /// jobs' handles. Fails only when the scratch directory cannot be made.
    pub fn start(config: EngineConfig) -> std::io::Result<Evaluator> {
        Evaluator::launch(config, None)
    }

    /// As [`Evaluator::start`], with the stream of every job's events. The stream is unbounded:
    /// read it until it ends, or drop it (events then go nowhere).
    pub fn start_with_events(
        config: EngineConfig,
    ) -> std::io::Result<(Evaluator, Receiver<Event>)> {
        let (events, stream) = unbounded();
        Ok((Evaluator::launch(config, Some(events))?, stream))
    }

    fn launch(config: EngineConfig, events: Option<Sender<Event>>) -> std::io::Result<Evaluator> {
        std::fs::create_dir_all(&config.scratch_parent)?;
        crate::scratch::sweep(&config.scratch_parent);
        let scratch =
            tempfile::Builder::new().prefix("cudal1-").tempdir_in(&config.scratch_parent)?;
        let owner = crate::scratch::claim(scratch.path())?;
        let compile_workers = config.compile_workers.max(1);
        let shared = Arc::new(Shared {
            scratch: scratch.path().to_owned(),
            compile_q: Queue::new(),
            ready_q: Queue::new(),
            gates: config.devices.iter().map(DeviceSlot::of).collect(),
            admission: Admission::new(config.memory.clone(), config.devices.len()),
            footprints: Mutex::new(HashMap::new()),
            sizing: sizer::Pending::default(),
            seen: Mutex::new(HashMap::new()),
            events,
            cancelled: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            compilers_alive: AtomicUsize::new(compile_workers),
            started: Instant::now(),
            references_started: AtomicUsize::new(0),
            references_reused: AtomicUsize::new(0),
            config,
        });
        // The fork server imports torch while the first candidates compile.
        for device in &shared.config.devices {
            crate::runner::prestart(&shared.config.env, device);
        }
        let mut threads = Vec::new();
        let asks = shared.admits_by_memory().then(|| {
            let (asks, requests) = sizer::channel();
            let weak = Arc::downgrade(&shared);
            threads.push(spawn_named("sizer".into(), move || sizer::run(weak, requests)));
            asks
        });
        for n in 0..compile_workers {
            let shared = Arc::clone(&shared);
            threads.push(spawn_named(format!("compile-{n}"), move || compile_loop(&shared)));
        }
        let lanes = shared.config.lanes.max(1);
        for d in 0..shared.config.devices.len() {
            for l in 0..lanes {
                let shared = Arc::clone(&shared);
                threads
                    .push(spawn_named(format!("lane-{d}-{l}"), move || lane::run(&shared, d, l)));
            }
        }
        Ok(Evaluator { shared, threads, scratch: Some(scratch), asks, _owner: owner })
    }

    /// Queues a job; its outcome arrives on the handle and as its last event. After
    /// [`Evaluator::cancel`] a job ends at once as cancelled.
    pub fn submit(&self, job: Job) -> JobHandle {
        let (reply, outcome) = bounded(1);
        let id = self.enqueue(job, Reply::Handle(reply));
        JobHandle { id, outcome }
    }

    /// As [`Evaluator::submit`], with the outcome sent to `done` (one channel for many jobs, for
    /// loops that wait on whichever finishes first).
    pub fn submit_to(&self, job: Job, done: &Sender<Done>) -> JobId {
        self.enqueue(job, Reply::Queue(done.clone()))
    }

    fn enqueue(&self, job: Job, reply: Reply) -> JobId {
        let s = &self.shared;
        let id = JobId(s.next_id.fetch_add(1, Ordering::SeqCst));
        let mode = match &job.work {
            Work::Evaluate { mode, .. } => Some(*mode),
            Work::CheckTask { .. } | Work::Describe => None,
        };
        s.emit(id, EventKind::Queued { task: job.task.key(), label: job.label(), mode });
        self.size_ahead(&job);
        let compiles = job.candidate().is_some_and(|c| needs_compile(&c.source));
        let entry = Entry {
            id,
            job,
            reply,
            submitted: Instant::now(),
            compiled: CompileOutcome::NotNeeded,
            compile_wall: Duration::ZERO,
        };
        if s.cancelled() {
            s.end(entry, JobOutcome::Cancelled);
        } else if compiles {
            let priority = entry.job.priority;
            if let Err(entry) = s.compile_q.push(priority, entry) {
                s.end(entry, JobOutcome::Cancelled);
            }
        } else {
            s.ready(entry);
        }
        id
    }

    /// Asks the sizing thread for the job's task, the first time a job of it comes.
    fn size_ahead(&self, job: &Job) {
        let (Some(asks), Work::Evaluate { .. } | Work::CheckTask { .. }) = (&self.asks, &job.work)
        else {
            return;
        };
        let s = &self.shared;
        let key = Shared::sizing_key(&job.task, &s.config.settings);
        let sized = s
            .footprints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(&key);
        if !sized && s.sizing.ask(&key) {
            let request =
                sizer::Request { key, task: job.task.clone(), settings: s.config.settings.clone() };
            if let Err(e) = asks.send(request) {
                s.sizing.answer(&e.into_inner().key);
            }
        }
    }

    /// Drains: evaluations under way finish (their outcomes are real), everything queued ends as
    /// cancelled, and later submissions are cancelled at once.
    pub fn cancel(&self) {
        self.canceller().cancel();
    }

    /// Stops now: cancels, and kills every runner process of this engine, so that evaluations
    /// under way end at once (as cancelled, not with a verdict).
    pub fn kill(&self) {
        self.canceller().kill();
    }

    pub fn is_cancelled(&self) -> bool {
        self.shared.cancelled()
    }

    /// A handle that cancels or kills this engine from elsewhere (a Ctrl-C handler).
    pub fn canceller(&self) -> Canceller {
        Canceller { shared: Arc::clone(&self.shared) }
    }

    /// The engine's own scratch directory (removed when the engine ends).
    pub fn scratch(&self) -> &Path {
        &self.shared.scratch
    }

    pub fn devices(&self) -> &[Device] {
        &self.shared.config.devices
    }

    /// A handle that says what a process outside the engine holds on a device
    /// ([`OutsideMemory::hold`]).
    pub fn outside_memory(&self) -> OutsideMemory {
        OutsideMemory { shared: Arc::clone(&self.shared) }
    }

    /// Who judges this engine's evaluations: part of every key their results are stored under.
    pub fn judge(&self) -> &Judge {
        &self.shared.config.judge
    }

    pub fn settings(&self) -> &EvalSettings {
        &self.shared.config.settings
    }

    /// Jobs waiting for a compile worker or a device.
    pub fn queued(&self) -> usize {
        self.shared.compile_q.len() + self.shared.ready_q.len()
    }

    pub fn stats(&self) -> EngineStats {
        let s = &self.shared;
        EngineStats {
            wall: s.started.elapsed(),
            timing_busy: s
                .config
                .devices
                .iter()
                .cloned()
                .zip(s.gates.iter().map(DeviceSlot::exclusive_busy))
                .collect(),
            references_started: s.references_started.load(Ordering::Relaxed),
            references_reused: s.references_reused.load(Ordering::Relaxed),
        }
    }

    /// Takes no more jobs, waits until every job has ended, and removes the scratch directory.
    pub fn finish(mut self) -> EngineStats {
        self.close_and_join();
        self.stats()
    }

    fn close_and_join(&mut self) {
        // The sizing thread ends once it has answered what was asked.
        self.asks.take();
        // The last compile worker to leave closes the ready queue (compiled jobs still go there).
        self.shared.compile_q.close();
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                tracing::error!("an engine thread panicked");
            }
        }
        if let Some(dir) = self.scratch.take() {
            if let Err(e) = dir.close() {
                tracing::warn!(error = %e, "could not remove the engine's scratch directory");
            }
        }
    }
}

impl Drop for Evaluator {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.kill();
            self.close_and_join();
        }
    }
}

/// Tells an [`Evaluator`] what a process outside it holds on one of its devices (a training run's
/// policy worker, between its turns on the GPU where its samples are judged); cheap to clone.
#[derive(Clone)]
pub struct OutsideMemory {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for OutsideMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutsideMemory").finish_non_exhaustive()
    }
}

impl OutsideMemory {
    /// The process outside holds `reserved` bytes of `device` through its allocator (its CUDA
    /// context's share is added here), replacing what was said before; 0: it holds none. Jobs
    /// are admitted into what is left. A job whose need fits the device but not beside that runs
    /// alone, and when it runs out of memory there it gets no verdict
    /// ([`JobOutcome::HostFailed`]): alone on the device it might have fitted. A device the
    /// engine does not judge on is ignored.
    pub fn hold(&self, device: &Device, reserved: u64) {
        let Some(index) = self.shared.config.devices.iter().position(|d| d == device) else {
            return;
        };
        let held = if reserved == 0 { 0 } else { reserved.saturating_add(DEVICE_OVERHEAD) };
        tracing::debug!(%device, held = %cudal1_supervisor::human_bytes(held), "memory held outside the engine");
        self.shared.admission.hold_outside(index, held);
    }
}

/// Cancels or kills an [`Evaluator`] from another thread; cheap to clone.
#[derive(Clone)]
pub struct Canceller {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Canceller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canceller").field("cancelled", &self.shared.cancelled()).finish()
    }
}

impl Canceller {
    /// As [`Evaluator::cancel`]. Extension builds under way are killed at once: their jobs would
    /// end as cancelled anyway, and a build may take a minute.
    pub fn cancel(&self) {
        let s = &self.shared;
        s.cancelled.store(true, Ordering::SeqCst);
        crate::runner::kill_builds_under(&s.scratch);
        for entry in s.compile_q.drain().into_iter().chain(s.ready_q.drain()) {
            s.end(entry, JobOutcome::Cancelled);
        }
    }

    /// As [`Evaluator::kill`].
    pub fn kill(&self) {
        self.shared.killed.store(true, Ordering::SeqCst);
        self.cancel();
        crate::runner::kill_under(&self.shared.scratch);
    }
}

fn spawn_named(name: String, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new().name(name).spawn(f).expect("the system can start a thread")
}

fn compile_loop(shared: &Shared) {
    while let Some(mut entry) = shared.compile_q.pop(|_| true) {
        if shared.cancelled() {
            shared.end(entry, JobOutcome::Cancelled);
            continue;
        }
        shared.emit(entry.id, EventKind::Compiling);
        let started = Instant::now();
        let settings = job_settings(&shared.config.settings, &Device::Cpu, &entry.job);
        let candidate = entry.job.candidate().expect("only candidates are compiled");
        let stop = || shared.cancelled();
        let outcome = compile_until(
            &shared.config.env,
            &entry.job.task,
            candidate,
            &shared.config.compile_cache,
            &settings,
            &shared.scratch,
            &stop,
        );
        let (ms, cached, ok) = match &outcome {
            CompileOutcome::Built { ms, cached, .. } => (*ms, *cached, true),
            CompileOutcome::Failed { ms, .. } => (*ms, false, false),
            CompileOutcome::NotNeeded => (0.0, false, true),
        };
        shared.emit(entry.id, EventKind::Compiled { ms, cached, ok });
        entry.compiled = outcome;
        entry.compile_wall = started.elapsed();
        shared.ready(entry);
    }
    if shared.compilers_alive.fetch_sub(1, Ordering::SeqCst) == 1 {
        shared.ready_q.close();
    }
}

/// The settings a job runs under on `device`.
fn job_settings(base: &EvalSettings, device: &Device, job: &Job) -> EvalSettings {
    let mode = match &job.work {
        Work::Evaluate { mode, .. } => *mode,
        Work::CheckTask { .. } | Work::Describe => Mode::Correctness,
    };
    EvalSettings { device: device.clone(), mode, ..base.clone() }
}
