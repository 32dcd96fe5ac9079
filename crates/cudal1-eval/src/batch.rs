//! Batches: a pool of CPU workers builds extensions ahead of GPU time, one worker per device
//! evaluates (one timing job per GPU at a time), and every step is reported as an event to the
//! caller's thread, which owns all output (progress, the store).

use crate::candidate::{evaluate_candidate, evaluate_in, CandidateProcess, EvalContext};
use crate::compile::{compile, needs_compile, CompileCache, CompileOutcome};
use crate::reference::{ReferenceError, ReferenceSession};
use crate::runner::RunnerEnv;
use crate::settings::{Device, EvalSettings};
use crate::verdict::Evaluation;
use crossbeam_channel::{unbounded, Receiver, Sender};
use cudal1_task::{Candidate, Task};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, Clone)]
pub struct BatchJob {
    /// The caller's own index for this job; events carry it back.
    pub id: usize,
    /// Index into the batch's tasks.
    pub task: usize,
    pub candidate: Candidate,
}

#[derive(Debug)]
pub enum BatchEvent {
    Compiled { id: usize, ms: f64, cached: bool, ok: bool },
    Started { id: usize, device: Device },
    Finished { id: usize, evaluation: Box<Evaluation> },
    /// The task's reference failed; the job gets no verdict.
    ReferenceFailed { id: usize, error: String },
    /// Left undone because the batch was cancelled.
    Skipped { id: usize },
}

/// What a batch runs on.
pub struct Batch<'a> {
    pub env: &'a RunnerEnv,
    pub tasks: &'a [Task],
    pub devices: &'a [Device],
    pub settings: &'a EvalSettings,
    pub cache: &'a CompileCache,
    pub work_root: &'a Path,
    pub compile_workers: usize,
    pub seed: u64,
    /// Set once to drain: running evaluations finish, nothing new starts.
    pub cancel: &'a AtomicBool,
    /// Start the next candidates' processes while the current one is timed; `None`: on GPUs
    /// only, since on the CPU the start-up would take a core from the timed processes.
    pub prefetch: Option<bool>,
}

/// How many reference processes a device worker keeps alive (they hold weights on the GPU).
const REFERENCES_PER_DEVICE: usize = 3;

/// How many candidate processes a device worker starts ahead: two, so that a candidate that fails
/// at once still finds the next one's interpreter ready.
const PREFETCH_DEPTH: usize = 2;

impl Batch<'_> {
    pub fn run(&self, jobs: Vec<BatchJob>, mut on_event: impl FnMut(BatchEvent)) {
        let (ready_tx, ready_rx) = unbounded::<(BatchJob, CompileOutcome)>();
        let (compile_tx, compile_rx) = unbounded::<BatchJob>();
        let (event_tx, event_rx) = unbounded::<BatchEvent>();
        // Programs without extensions go straight to the devices, so GPUs start at once.
        for job in jobs {
            if needs_compile(&job.candidate.source) {
                compile_tx.send(job).expect("receiver alive");
            } else {
                ready_tx.send((job, CompileOutcome::NotNeeded)).expect("receiver alive");
            }
        }
        drop(compile_tx);
        std::thread::scope(|scope| {
            for _ in 0..self.compile_workers.max(1) {
                let (rx, tx, events) = (compile_rx.clone(), ready_tx.clone(), event_tx.clone());
                scope.spawn(move || self.compile_loop(rx, tx, events));
            }
            drop(ready_tx);
            for (n, device) in self.devices.iter().enumerate() {
                let (rx, events) = (ready_rx.clone(), event_tx.clone());
                scope.spawn(move || self.device_loop(device, rx, events, self.seed.wrapping_add(n as u64)));
            }
            drop(event_tx);
            for event in event_rx {
                on_event(event);
            }
        });
    }

    fn compile_loop(&self, jobs: Receiver<BatchJob>, ready: Sender<(BatchJob, CompileOutcome)>, events: Sender<BatchEvent>) {
        for job in jobs {
            if self.cancel.load(Ordering::SeqCst) {
                let _ = events.send(BatchEvent::Skipped { id: job.id });
                continue;
            }
            let outcome = compile(self.env, &self.tasks[job.task], &job.candidate, self.cache, self.settings, self.work_root);
            let (ms, cached, ok) = match &outcome {
                CompileOutcome::Built { ms, cached, .. } => (*ms, *cached, true),
                CompileOutcome::Failed { ms, .. } => (*ms, false, false),
                CompileOutcome::NotNeeded => (0.0, false, true),
            };
            let _ = events.send(BatchEvent::Compiled { id: job.id, ms, cached, ok });
            let _ = ready.send((job, outcome));
        }
    }

    fn device_loop(&self, device: &Device, ready: Receiver<(BatchJob, CompileOutcome)>, events: Sender<BatchEvent>, seed: u64) {
        let settings = EvalSettings { device: device.clone(), ..self.settings.clone() };
        let ctx = EvalContext { env: self.env, settings: &settings, work_root: self.work_root };
        let mut references: VecDeque<(usize, ReferenceSession)> = VecDeque::new();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut ahead: VecDeque<(BatchJob, CompileOutcome, Option<CandidateProcess>)> = VecDeque::new();
        loop {
            let (job, compiled, process) = match ahead.pop_front() {
                Some(n) => n,
                None => match ready.recv() {
                    Ok((job, compiled)) => (job, compiled, None),
                    Err(_) => break,
                },
            };
            if self.cancel.load(Ordering::SeqCst) {
                if let Some(p) = process {
                    p.discard();
                }
                let _ = events.send(BatchEvent::Skipped { id: job.id });
                continue;
            }
            while self.prefetch.unwrap_or(device.is_cuda()) && ahead.len() < PREFETCH_DEPTH {
                let Ok((job, compiled)) = ready.try_recv() else { break };
                let process = match &compiled {
                    CompileOutcome::Failed { .. } => None,
                    _ => CandidateProcess::start(&ctx, &self.tasks[job.task].path, &job.candidate, &compiled).ok(),
                };
                ahead.push_back((job, compiled, process));
            }
            let _ = events.send(BatchEvent::Started { id: job.id, device: device.clone() });
            let reference = match references.iter().position(|(t, _)| *t == job.task) {
                Some(i) => Ok(i),
                None => ReferenceSession::start(self.env, &self.tasks[job.task], &settings, self.work_root).map(|r| {
                    if references.len() >= REFERENCES_PER_DEVICE {
                        if let Some((_, old)) = references.pop_front() {
                            old.shutdown();
                        }
                    }
                    references.push_back((job.task, r));
                    references.len() - 1
                }),
            };
            let result = match reference {
                Ok(i) => {
                    let job_rng = StdRng::from_rng(&mut rng);
                    let result = evaluate_in(&ctx, &mut references[i].1, &job.candidate, &compiled, process, job_rng);
                    match &result {
                        Ok(_) => references[i].1.clear_expected(),
                        // A reference that failed once is not trusted again.
                        Err(_) => {
                            if let Some((_, r)) = references.remove(i) {
                                r.shutdown();
                            }
                        }
                    }
                    result
                }
                Err(e) => {
                    if let Some(p) = process {
                        p.discard();
                    }
                    Err(e)
                }
            };
            let event = match result {
                Ok(evaluation) => BatchEvent::Finished { id: job.id, evaluation: Box::new(evaluation) },
                Err(e) => BatchEvent::ReferenceFailed { id: job.id, error: e.to_string() },
            };
            let _ = events.send(event);
        }
        for (_, r) in references {
            r.shutdown();
        }
    }
}

/// Evaluates one candidate against one task: the batch machinery with a single job.
pub fn evaluate_one(
    env: &RunnerEnv,
    task: &Task,
    candidate: &Candidate,
    settings: &EvalSettings,
    cache: &CompileCache,
    work_root: &Path,
    seed: u64,
) -> Result<Evaluation, ReferenceError> {
    let compiled = compile(env, task, candidate, cache, settings, work_root);
    let mut reference = ReferenceSession::start(env, task, settings, work_root)?;
    let ctx = EvalContext { env, settings, work_root };
    let result = evaluate_candidate(&ctx, &mut reference, candidate, &compiled, StdRng::seed_from_u64(seed));
    reference.shutdown();
    result
}
