//! One lane of a device: the only loop in cudal1 that runs work on a device. It takes ready jobs
//! from the engine's queue, holds the device's gate while a job runs (alone for a timed job,
//! shared for checks), keeps the references of its last tasks alive, and on GPUs starts the next
//! candidates' processes while the current one runs. Between checks that are not timed, a kept
//! reference process loads the next job's task while the current job runs.

use super::{job_settings, Entry, JobOutcome, Shared, Work};
use crate::candidate::{
    evaluate_in, prejudge, prejudged, CandidateProcess, EvalContext, Retired, Unjudged,
    JUDGED_AGAIN_ALONE,
};
use crate::degenerate::check_task;
use crate::engine::EventKind;
use crate::failure::host_out_of_memory;
use crate::memory::{Footprint, MemoryNeed};
use crate::reference::{Describer, ReferenceError, ReferenceSession, StartingReference};
use crate::runner::AHEAD_NICE;
use crate::settings::{Device, EvalSettings};
use crate::verdict::{Evaluation, Warning};
use cudal1_task::Task;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// References a lane keeps alive (they hold weights on the device). The timing lane keeps more:
/// an `optimize` or training run returns to the same few tasks.
const REFERENCES_TIMING_LANE: usize = 3;
const REFERENCES_OTHER_LANE: usize = 2;

/// Reference processes a lane starts for checks that are not timed: later tasks load into them.
const CHECK_REFERENCES: usize = 2;

/// How many candidate processes a lane starts ahead: two, so that a candidate that fails at once
/// still finds the next one's interpreter ready.
const PREFETCH_DEPTH: usize = 2;

/// A job taken from the queue, with its candidate's process if it was started ahead.
struct Staged {
    entry: Entry,
    process: Option<CandidateProcess>,
}

struct Lane<'a> {
    shared: &'a Shared,
    device: Device,
    device_index: usize,
    /// Lane 0 of a device takes every job; the others only those that do not time.
    times: bool,
    prefetch: bool,
    references: VecDeque<(String, ReferenceSession)>,
    /// References started ahead for staged jobs, by task hash.
    starting: Vec<(String, StartingReference)>,
    /// A kept reference loading the next job's task beside the current job, by task hash. It
    /// works on the device, so it is joined before the lane lets the device go.
    reloading: Option<(String, JoinHandle<Result<ReferenceSession, ReferenceError>>)>,
    /// Candidate processes of finished jobs, ending in the background.
    retired: Retired,
    /// The runner that describes tasks (`tasks list`), kept from one task to the next.
    describer: Option<Describer>,
    capacity: usize,
    rng: StdRng,
}

pub(super) fn run(shared: &Shared, device_index: usize, lane_index: usize) {
    let device = shared.config.devices[device_index].clone();
    let times = lane_index == 0;
    let seed = shared.config.seed ^ ((device_index as u64) << 32) ^ lane_index as u64;
    let mut lane = Lane {
        shared,
        prefetch: shared.config.prefetch.unwrap_or(device.is_cuda()),
        device,
        device_index,
        times,
        references: VecDeque::new(),
        starting: Vec::new(),
        reloading: None,
        retired: Retired::default(),
        describer: None,
        capacity: if times { REFERENCES_TIMING_LANE } else { REFERENCES_OTHER_LANE },
        rng: StdRng::seed_from_u64(seed),
    };
    lane.serve();
    for (_, r) in lane.references.drain(..) {
        r.shutdown();
    }
    for (_, r) in lane.starting.drain(..) {
        r.discard();
    }
    if let Some(d) = lane.describer.take() {
        d.shutdown();
    }
    lane.retired.wait();
}

impl Lane<'_> {
    fn accepts(&self, entry: &Entry) -> bool {
        self.times || !entry.job.times() || self.shared.config.pipeline
    }

    fn serve(&mut self) {
        let mut ahead: VecDeque<Staged> = VecDeque::new();
        loop {
            let staged = match ahead.pop_front() {
                Some(s) => s,
                // Its candidate's interpreter starts beside its reference's, not after it.
                None => match self.shared.ready_q.pop(|e| self.accepts(e)) {
                    Some(entry) => {
                        let process = if self.prefetch && !self.shared.cancelled() {
                            self.start_ahead(&entry)
                        } else {
                            None
                        };
                        Staged { entry, process }
                    }
                    None => break,
                },
            };
            if self.shared.cancelled() {
                self.cancel(staged);
                continue;
            }
            while self.prefetch && ahead.len() < PREFETCH_DEPTH {
                let Some(entry) = self.shared.ready_q.try_pop(|e| self.accepts(e)) else { break };
                let process = self.start_ahead(&entry);
                ahead.push_back(Staged { entry, process });
            }
            self.run_one(staged, ahead.front().map(|s| &s.entry));
        }
        for staged in ahead {
            self.cancel(staged);
        }
    }

    fn cancel(&self, staged: Staged) {
        if let Some(p) = staged.process {
            p.discard();
        }
        self.shared.end(staged.entry, JobOutcome::Cancelled);
    }

    /// Starts a candidate's interpreter before its turn, and its task's reference if no reference
    /// of that task is running or starting; nothing of the candidate runs yet, and neither touches
    /// the device. A candidate decided without running gets neither.
    fn start_ahead(&mut self, entry: &Entry) -> Option<CandidateProcess> {
        let Work::Evaluate { candidate, .. } = &entry.job.work else { return None };
        if prejudge(candidate, &entry.compiled).0.is_some() {
            return None;
        }
        let settings = job_settings(&self.shared.config.settings, &self.device, &entry.job);
        let known = self.holds(&entry.job.task.hash, &settings);
        // A check that is not timed loads its task into a reference process the lane already
        // has (ahead, or at its turn), once the lane has two: the running job's, and one to load
        // the next job's task meanwhile.
        let reuses = !settings.mode.times()
            && self.references.len() + self.starting.len() >= CHECK_REFERENCES;
        // Processes of checks yield the cores to those whose turn it is until theirs comes;
        // those of timed jobs never run niced.
        let nice = !settings.mode.times();
        if !known && !reuses {
            if let Ok(r) = ReferenceSession::spawn(
                &self.shared.config.env,
                &entry.job.task,
                &settings,
                &self.shared.scratch,
            ) {
                self.shared.references_started.fetch_add(1, Ordering::Relaxed);
                if nice {
                    r.set_nice(AHEAD_NICE);
                }
                self.starting.push((entry.job.task.hash.clone(), r));
            }
        }
        let ctx = EvalContext {
            env: &self.shared.config.env,
            settings: &settings,
            work_root: &self.shared.scratch,
            retired: None,
            before_timing: None,
            shares_device: false,
        };
        let process =
            CandidateProcess::start(&ctx, &entry.job.task.path, candidate, &entry.compiled).ok();
        if let (Some(p), true) = (&process, nice) {
            p.set_nice(AHEAD_NICE);
        }
        process
    }

    /// Whether the lane has a reference, running or starting, that may serve a job of this task
    /// and settings: one that loaded another task before, or was started for checks, serves only
    /// checks that are not timed.
    fn holds(&self, hash: &str, settings: &EvalSettings) -> bool {
        let times = settings.mode.times();
        self.references.iter().any(|(h, r)| h == hash && (!times || r.may_time()))
            || self.starting.iter().any(|(h, r)| h == hash && (!times || r.may_time()))
    }

    /// `next` is the job staged after this one, whose task a kept reference may load meanwhile.
    fn run_one(&mut self, staged: Staged, next: Option<&Entry>) {
        let Staged { entry, process } = staged;
        if let Some(p) = &process {
            p.set_nice(0);
        }
        let picked = Instant::now();
        let settings = job_settings(&self.shared.config.settings, &self.device, &entry.job);
        let gate = &self.shared.gates[self.device_index];
        // Its memory first, then the device: a job never holds the gate while it waits for memory,
        // so a job that holds memory can always go on to take the device alone.
        let admitted = self.need(&entry, &settings).map(|need| {
            self.shared.admission.admit(self.device_index, need, |wait| {
                tracing::debug!(job = %entry.id, need = %wait.need.describe(), reserved = %wait.reserved.describe(), alone = wait.alone, "waiting for memory");
                self.shared.emit(entry.id, EventKind::WaitingForMemory(wait));
            })
        });
        let memory_wait = admitted.as_ref().map_or(Duration::ZERO, |a| a.waited);
        // Its need fits the device, but not beside what a process outside the engine holds there.
        let crowded = admitted.as_ref().is_some_and(|a| a.crowded);
        // Pipelined, a timed job shares the device until its outputs are checked, then takes it
        // alone (`before_timing`); so does a timed job with Triton kernels, whose JIT compiles
        // and autotuning (its warm-up) are build time and stay off the timing slot. Otherwise a
        // timed job holds the device alone from the start, as does a job whose memory need is
        // more than the device (or the host) has.
        let alone_for_memory = admitted.as_ref().is_some_and(|a| a.alone);
        let pipelined = self.shared.config.pipeline || entry.job.warms_up_off_slot();
        let alone_from_start = (entry.job.times() && !pipelined) || alone_for_memory;
        let held = std::cell::RefCell::new(Some(if alone_from_start {
            gate.exclusive()
        } else {
            gate.shared()
        }));
        // Cancelled while it waited for memory or the device: nothing new starts.
        if self.shared.cancelled() {
            drop(held);
            drop(admitted);
            self.cancel(Staged { entry, process });
            return;
        }
        let slot_wait = picked.elapsed();
        self.shared.emit(entry.id, EventKind::Started { device: self.device.clone() });
        if alone_from_start && entry.job.times() {
            self.shared.emit(entry.id, EventKind::Timing);
        }
        let id = entry.id;
        let take_alone = || {
            // Let go of the shared hold first: waiting for the exclusive one while holding it
            // would wait for ourselves.
            held.borrow_mut().take();
            let alone = gate.exclusive();
            *held.borrow_mut() = Some(alone);
            if entry.job.times() {
                self.shared.emit(id, EventKind::Timing);
            }
        };
        let before_timing: Option<&dyn Fn()> =
            if entry.job.times() && !alone_from_start { Some(&take_alone) } else { None };
        // Other lanes' jobs may run beside this one until it holds the device alone.
        let shares = !alone_from_start && self.shared.config.lanes > 1;
        let outcome = match &entry.job.work {
            Work::Evaluate { candidate, .. } => {
                let next = if entry.job.times() { None } else { next };
                let mut result = self.evaluate(
                    &entry,
                    candidate,
                    process,
                    &settings,
                    before_timing,
                    next,
                    shares,
                );
                // Out of device memory or time beside other lanes' work, or a reference that failed
                // there: no verdict, and no blame for the task, until it ran holding the device alone.
                let first_try = match &result {
                    Ok(e) if e.reason_class == JUDGED_AGAIN_ALONE => Some(e.reason.clone()),
                    Err(Unjudged::Reference(e)) if shares => {
                        Some(format!("its task's reference failed: {e}"))
                    }
                    _ => None,
                };
                if let Some(first_try) = first_try {
                    self.settle_reload();
                    take_alone();
                    result = self.evaluate(&entry, candidate, None, &settings, None, None, false);
                    if let Ok(e) = &mut result {
                        e.warnings.push(Warning {
                            class: JUDGED_AGAIN_ALONE.into(),
                            message: format!("beside other jobs it {first_try}; this verdict was reached holding the device alone"),
                        });
                    }
                }
                match result {
                    // Out of memory beside what is held outside the engine (a policy worker): it
                    // might have fitted the device alone, so this is no verdict on the program.
                    Ok(e) if crowded && e.reason_class == "out_of_memory" => {
                        crowded_out(&candidate.label, &e.reason, &self.device)
                    }
                    Err(Unjudged::Reference(e)) if crowded && e.out_of_device_memory() => {
                        crowded_out(&candidate.label, &e.to_string(), &self.device)
                    }
                    Ok(mut e) => {
                        account(&mut e, &entry, picked, slot_wait, memory_wait);
                        e.judge = Some(self.shared.config.judge.clone());
                        JobOutcome::Evaluated(Arc::new(e))
                    }
                    Err(Unjudged::Reference(e)) => reference_failed(&e),
                    Err(Unjudged::Host(error)) => {
                        JobOutcome::HostFailed { error: format!("{}: {error}", candidate.label) }
                    }
                }
            }
            Work::CheckTask { seeds } => match check_task(
                &self.shared.config.env,
                &entry.job.task,
                &settings,
                &self.shared.scratch,
                seeds,
            ) {
                Ok(c) => JobOutcome::Checked(Arc::new(c)),
                Err(e) if host_out_of_memory(&e.source) => {
                    JobOutcome::HostFailed { error: e.to_string() }
                }
                Err(e) => JobOutcome::TaskFailed {
                    error: e.to_string(),
                    at_start: false,
                    remedies: e.source.remedies(),
                },
            },
            Work::Describe => match self.describe(&entry.job.task, &settings) {
                Ok(d) => JobOutcome::Described(Arc::new(d)),
                Err(e) => reference_failed(&e),
            },
        };
        // Killed processes give verdicts that mean nothing.
        let outcome =
            if self.shared.killed.load(Ordering::SeqCst) { JobOutcome::Cancelled } else { outcome };
        // Reported before the device is let go, so that in the event stream no job starts on a
        // device before the one that held it alone has finished.
        self.shared.end(entry, outcome);
        self.settle_reload();
        drop(held);
        drop(admitted);
    }

    /// What `entry` needs in memory before it may start, on the lane's device and on the host;
    /// `None` when it needs nothing worth waiting for (a candidate decided from its source), or no
    /// budget limits anything.
    fn need(&mut self, entry: &Entry, settings: &EvalSettings) -> Option<MemoryNeed> {
        let budget = &self.shared.config.memory;
        if budget.host.is_none()
            && budget.devices.get(self.device_index).copied().flatten().is_none()
        {
            return None;
        }
        match &entry.job.work {
            Work::Evaluate { candidate, .. }
                if prejudge(candidate, &entry.compiled).0.is_some() =>
            {
                return None
            }
            // One runner on the CPU.
            Work::Describe => {
                return Some(MemoryNeed {
                    device: 0,
                    host: MemoryNeed::evaluation(None, 0, &Device::Cpu, None, None).host / 2,
                })
            }
            Work::Evaluate { .. } | Work::CheckTask { .. } => {}
        }
        let task = &entry.job.task;
        let footprint = self.footprint(task, settings);
        let seen = self
            .shared
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&task.hash)
            .copied();
        let limit = settings.memory_bytes.filter(|_| settings.sandbox);
        let seeds = settings.correctness_seeds;
        let kept =
            footprint.as_ref().map_or(0, |f| f.kept_on_device(seeds, settings.share_bytes()));
        let mut need = MemoryNeed::evaluation(footprint.as_ref(), kept, &self.device, seen, limit);
        if let Some(f) =
            footprint.as_ref().filter(|_| crate::scratch::in_memory(&self.shared.scratch))
        {
            need.host = need.host.saturating_add(f.output_files(seeds, kept));
        }
        Some(need)
    }

    /// The task's footprint on meta tensors, sized once per engine (by the sizing thread, else by
    /// the lane's describing runner; neither allocates anything); `None` where it cannot be sized
    /// without running it.
    fn footprint(&mut self, task: &Task, settings: &EvalSettings) -> Option<Footprint> {
        let key = Shared::sizing_key(task, settings);
        let sized = |shared: &Shared| {
            shared
                .footprints
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&key)
                .copied()
        };
        if let Some(f) = sized(self.shared) {
            return f;
        }
        // Asked of the sizing thread when its first job came: its answer, unless it is late.
        if self.shared.sizing.wait(&key, settings.load_timeout.min(Duration::from_secs(120))) {
            if let Some(f) = sized(self.shared) {
                return f;
            }
        }
        // The lane sizes the task itself only where the sizing thread gave no answer. Every job
        // that gets here was asked of it: a lane asks for a footprint only under a memory budget,
        // the engine starts the thread whenever it has one, and `Evaluator::size_ahead` asks for
        // each Evaluate and CheckTask job at submission under this same key (`job_settings`
        // keeps the scale). Yet (a) the wait above times out when the one sizing runner, which
        // answers in submission order, is still busy with tasks submitted before this one or
        // with this one, or when it panicked during this task's request (the key stays pending);
        // and (b) the key is cleared with nothing stored once the sizing thread is gone (it
        // panicked): `size_ahead`'s send fails and it clears the key unanswered.
        let mut describer = match self.describer.take() {
            Some(d) => d,
            None => match Describer::start(&self.shared.config.env, &self.shared.scratch) {
                Ok(d) => d,
                Err((doing, e)) => {
                    tracing::debug!(error = %e, doing, "no runner to size tasks; admitting on overheads alone");
                    return None;
                }
            },
        };
        let result = describer.size(task, settings);
        if describer.alive(&result) {
            self.describer = Some(describer);
        } else {
            describer.shutdown();
        }
        let footprint = result.unwrap_or_else(|e| {
            tracing::debug!(error = %e, "the task could not be sized; admitting on overheads alone");
            None
        });
        self.shared
            .footprints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, footprint);
        footprint
    }

    /// Judges `entry`'s candidate (`candidate`, from its work).
    fn evaluate(
        &mut self,
        entry: &Entry,
        candidate: &cudal1_task::Candidate,
        process: Option<CandidateProcess>,
        settings: &EvalSettings,
        before_timing: Option<&dyn Fn()>,
        next: Option<&Entry>,
        shares_device: bool,
    ) -> Result<Evaluation, Unjudged> {
        let started = Instant::now();
        let (task, compiled) = (&*entry.job.task, &entry.compiled);
        let plain = EvalContext {
            env: &self.shared.config.env,
            settings,
            work_root: &self.shared.scratch,
            retired: None,
            before_timing: None,
            shares_device: false,
        };
        // Decided from the source and the build alone: no reference is started for it.
        if let Some(e) = prejudged(&plain, task, candidate, compiled) {
            if let Some(p) = process {
                p.discard();
            }
            return Ok(e);
        }
        let i = match self.reference(task, settings) {
            Ok(i) => i,
            Err(e) => {
                if let Some(p) = process {
                    p.discard();
                }
                return Err(e.into());
            }
        };
        let i = self.reload_ahead(next, i);
        let job_rng = StdRng::from_rng(&mut self.rng);
        let reference_ready = started.elapsed();
        // Pipelined, the next job may start timing as soon as this one lets the device go: its
        // process (a CUDA context's teardown) ends before then, not in the background.
        let retired = if before_timing.is_some() { None } else { Some(&self.retired) };
        let ctx = EvalContext {
            env: &self.shared.config.env,
            settings,
            work_root: &self.shared.scratch,
            retired,
            before_timing,
            shares_device,
        };
        let mut result =
            evaluate_in(&ctx, &mut self.references[i].1, candidate, compiled, process, job_rng);
        if let Ok(e) = &mut result {
            e.measurements.phase("reference", reference_ready);
        }
        self.remember_peak(i);
        match &result {
            // Seeds are fresh for every candidate: expected outputs (hundreds of MB each) go.
            Ok(_) => self.references[i].1.clear_expected(),
            // The machine ran short under the candidate: the reference is as good as before.
            Err(Unjudged::Host(_)) => self.references[i].1.clear_expected(),
            // A reference that failed once is not trusted again.
            Err(Unjudged::Reference(_)) => {
                if let Some((_, r)) = self.references.remove(i) {
                    r.shutdown();
                }
            }
        }
        result
    }

    /// Remembers the most memory the reference at `i` has held, for the admission of its task's
    /// next jobs: on the device, as it said (reset when a task loads), and on the host, unless the
    /// process loaded other tasks before (its high-water mark may be theirs).
    fn remember_peak(&self, i: usize) {
        let (hash, session) = &self.references[i];
        let host = if session.may_time() { session.client.peak_memory() } else { None };
        let mut seen = self.shared.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let kept = seen.entry(hash.clone()).or_default();
        kept.device = kept.device.max(session.device_peak.unwrap_or(0));
        kept.host = kept.host.max(host.unwrap_or(0));
    }

    /// Describes a task in the lane's describing runner, started on first use and kept for the
    /// next task unless it died.
    fn describe(
        &mut self,
        task: &Task,
        settings: &EvalSettings,
    ) -> Result<cudal1_protocol::DescribeReply, ReferenceError> {
        let mut describer = match self.describer.take() {
            Some(d) => d,
            None => Describer::start(&self.shared.config.env, &self.shared.scratch).map_err(
                |(doing, source)| ReferenceError {
                    task: task.key(),
                    doing,
                    source,
                    stderr: String::new(),
                },
            )?,
        };
        let result = describer.describe(task, settings);
        if describer.alive(&result) {
            self.describer = Some(describer);
        } else {
            describer.shutdown();
        }
        result
    }

    /// Starts loading `next`'s task, a check that is not timed, into a kept reference that the
    /// current job (its reference at `current`) does not use, unless the lane has one for it.
    /// The load runs beside the current job, on the device the lane holds; the process is the
    /// lane's oldest idle reference. Returns the current reference's index after the removal.
    fn reload_ahead(&mut self, next: Option<&Entry>, current: usize) -> usize {
        let Some(next) = next else { return current };
        let Work::Evaluate { candidate, .. } = &next.job.work else { return current };
        let settings = job_settings(&self.shared.config.settings, &self.device, &next.job);
        if settings.mode.times()
            || self.reloading.is_some()
            || prejudge(candidate, &next.compiled).0.is_some()
            || self.holds(&next.job.task.hash, &settings)
        {
            return current;
        }
        let Some(idle) = (0..self.references.len()).find(|&k| k != current) else { return current };
        // Its task's memory is taken before the job's turn: only where it fits beside the running
        // jobs' now (it is the next job's own, counted when the job is admitted).
        if let Some(need) = self.need(next, &settings) {
            if !self.shared.admission.fits_now(self.device_index, need) {
                return current;
            }
        }
        let Some((_, session)) = self.references.remove(idle) else { return current };
        let task = Task::clone(&next.job.task);
        let hash = task.hash.clone();
        match std::thread::Builder::new()
            .name("reference-reload".into())
            .spawn(move || session.reload(&task, &settings))
        {
            Ok(handle) => {
                self.shared.references_reused.fetch_add(1, Ordering::Relaxed);
                self.reloading = Some((hash, handle));
            }
            Err(e) => {
                tracing::warn!(error = %e, "no thread to load the next task ahead; it loads at its turn")
            }
        }
        if idle < current {
            current - 1
        } else {
            current
        }
    }

    /// Waits for the reference loading ahead, and keeps it for its job. One that failed is gone
    /// (its process ended); the job then gets a reference at its turn, which reports the failure.
    fn settle_reload(&mut self) {
        let Some((hash, handle)) = self.reloading.take() else { return };
        match handle.join() {
            Ok(Ok(session)) => {
                self.keep(hash, session);
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "loading the next task ahead failed"),
            Err(_) => tracing::warn!("the thread loading the next task ahead panicked"),
        }
    }

    /// For a check that is not timed, when the lane keeps as many references as it may: the
    /// oldest, whose process loads the new task instead of a fresh process starting (an
    /// interpreter and a CUDA context: seconds of CPU per task in correctness mode, where every
    /// candidate may bring its own task).
    fn reusable(&mut self, settings: &EvalSettings) -> Option<ReferenceSession> {
        if settings.mode.times() || self.references.len() < self.capacity {
            return None;
        }
        self.references.pop_front().map(|(_, r)| r)
    }

    /// The index of the task's running reference, started (and the oldest one ended) if need be.
    fn reference(&mut self, task: &Task, settings: &EvalSettings) -> Result<usize, ReferenceError> {
        let times = settings.mode.times();
        if let Some(i) = self.references.iter().position(|(hash, _)| *hash == task.hash) {
            if !times || self.references[i].1.may_time() {
                return Ok(i);
            }
            // A process that held another task before, or was made for checks, is not timed: a
            // fresh one is.
            if let Some((_, r)) = self.references.remove(i) {
                r.shutdown();
            }
        }
        let session = match self
            .starting
            .iter()
            .position(|(hash, r)| *hash == task.hash && (!times || r.may_time()))
        {
            Some(i) => {
                let starting = self.starting.swap_remove(i).1;
                starting.set_nice(0);
                starting.ready(settings)?
            }
            None => match self.reusable(settings) {
                Some(old) => {
                    self.shared.references_reused.fetch_add(1, Ordering::Relaxed);
                    old.reload(task, settings)?
                }
                None => {
                    self.shared.references_started.fetch_add(1, Ordering::Relaxed);
                    ReferenceSession::start(
                        &self.shared.config.env,
                        task,
                        settings,
                        &self.shared.scratch,
                    )?
                }
            },
        };
        Ok(self.keep(task.hash.clone(), session))
    }

    /// Keeps a ready reference as the newest, ending the oldest when the lane is full; returns
    /// its index.
    fn keep(&mut self, hash: String, session: ReferenceSession) -> usize {
        if self.references.len() >= self.capacity {
            if let Some((_, old)) = self.references.pop_front() {
                old.shutdown();
            }
        }
        self.references.push_back((hash, session));
        self.references.len() - 1
    }
}

/// A job that ran out of memory (`what`) while crowded: no verdict.
fn crowded_out(label: &str, what: &str, device: &Device) -> JobOutcome {
    JobOutcome::HostFailed {
        error: format!("{label}: {what}; its memory need fits {device} but not beside what a process outside the engine holds there (a training run's policy), so this is no verdict: alone on the device it might have fitted"),
    }
}

/// A failed reference: the task's fault, unless the machine ran out of memory under it.
fn reference_failed(e: &ReferenceError) -> JobOutcome {
    if e.host_out_of_memory() {
        JobOutcome::HostFailed { error: e.to_string() }
    } else {
        JobOutcome::TaskFailed {
            at_start: e.at_start(),
            error: e.to_string(),
            remedies: e.remedies(),
        }
    }
}

/// Where the job's whole time went: queueing, compiling and waiting for the device come before
/// the evaluation's own phases, and the duration runs from submission to verdict.
fn account(
    e: &mut Evaluation,
    entry: &Entry,
    picked: Instant,
    slot_wait: Duration,
    memory_wait: Duration,
) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let waited = picked.saturating_duration_since(entry.submitted);
    let phases = &mut e.measurements.phases_ms;
    phases.insert("queue".into(), ms(waited.saturating_sub(entry.compile_wall)));
    if !entry.compile_wall.is_zero() {
        phases.insert("compile".into(), ms(entry.compile_wall));
    }
    // Waiting for memory comes before waiting for the device, within the lane's time.
    if !memory_wait.is_zero() {
        phases.insert("memory_wait".into(), ms(memory_wait));
    }
    phases.insert("device_wait".into(), ms(slot_wait.saturating_sub(memory_wait)));
    e.duration_ms = ms(entry.submitted.elapsed());
    // What no phase names (handing results between threads, cleaning up): the phases sum to the
    // duration.
    let named: f64 = phases.values().sum();
    phases.insert("other".into(), (e.duration_ms - named).max(0.0));
}
