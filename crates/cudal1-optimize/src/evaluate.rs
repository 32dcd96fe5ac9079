//! The evaluator side of the loop: programs arrive one by one while the LLM is still writing
//! others. Programs that build extensions go to a pool of compile workers first (CPU, ahead of
//! device time); one worker per device then evaluates, keeping the task's reference process
//! alive across programs and rounds.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Scope;

use crossbeam_channel::{unbounded, Receiver, Sender};
use cudal1_eval::candidate::{evaluate_candidate, EvalContext};
use cudal1_eval::compile::{compile, needs_compile};
use cudal1_eval::{CompileCache, CompileOutcome, Device, EvalSettings, Evaluation, ReferenceSession, RunnerEnv};
use cudal1_task::{Candidate, Task};
use rand::rngs::StdRng;
use rand::SeedableRng;

/// What the evaluator runs on.
#[derive(Debug, Clone, Copy)]
pub struct EvalEnv<'a> {
    pub env: &'a RunnerEnv,
    pub devices: &'a [Device],
    pub settings: &'a EvalSettings,
    pub cache: &'a CompileCache,
    pub work_root: &'a Path,
    pub compile_workers: usize,
}

/// A program to evaluate, named by its normalised-source hash.
#[derive(Debug, Clone)]
pub struct EvalJob {
    pub code_hash: String,
    pub candidate: Candidate,
}

#[derive(Debug)]
pub enum EvalDone {
    Finished { code_hash: String, evaluation: Box<Evaluation> },
    /// The reference failed; the program got no verdict. `at_start`: it could not even start,
    /// so no program of this task can be judged.
    ReferenceFailed { code_hash: String, error: String, at_start: bool },
    /// Not started because of Ctrl-C.
    Skipped { code_hash: String },
}

/// Starts the compile and device workers; they stop once the returned sender is dropped and
/// their queues are empty.
pub fn spawn<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    eval: EvalEnv<'env>,
    task: &'env Task,
    cancel: &'env AtomicBool,
    seed: u64,
) -> (Sender<EvalJob>, Receiver<EvalDone>) {
    let (job_tx, job_rx) = unbounded::<EvalJob>();
    let (compile_tx, compile_rx) = unbounded::<EvalJob>();
    let (ready_tx, ready_rx) = unbounded::<(EvalJob, CompileOutcome)>();
    let (done_tx, done_rx) = unbounded::<EvalDone>();
    // The router keeps programs without extensions off the compile queue, so devices start at once.
    let router_ready = ready_tx.clone();
    scope.spawn(move || {
        for job in job_rx {
            let sent = if needs_compile(&job.candidate.source) {
                compile_tx.send(job).is_ok()
            } else {
                router_ready.send((job, CompileOutcome::NotNeeded)).is_ok()
            };
            if !sent {
                break;
            }
        }
    });
    for _ in 0..eval.compile_workers.max(1) {
        let (jobs, ready, done) = (compile_rx.clone(), ready_tx.clone(), done_tx.clone());
        scope.spawn(move || {
            for job in jobs {
                if cancel.load(Ordering::SeqCst) {
                    let _ = done.send(EvalDone::Skipped { code_hash: job.code_hash });
                    continue;
                }
                let outcome = compile(eval.env, task, &job.candidate, eval.cache, eval.settings, eval.work_root);
                let _ = ready.send((job, outcome));
            }
        });
    }
    drop(ready_tx);
    for (n, device) in eval.devices.iter().enumerate() {
        let (ready, done) = (ready_rx.clone(), done_tx.clone());
        let seed = seed.wrapping_add(n as u64);
        scope.spawn(move || device_loop(eval, task, device, cancel, &ready, &done, seed));
    }
    (job_tx, done_rx)
}

fn device_loop(
    eval: EvalEnv<'_>,
    task: &Task,
    device: &Device,
    cancel: &AtomicBool,
    ready: &Receiver<(EvalJob, CompileOutcome)>,
    done: &Sender<EvalDone>,
    seed: u64,
) {
    let settings = EvalSettings { device: device.clone(), ..eval.settings.clone() };
    let ctx = EvalContext { env: eval.env, settings: &settings, work_root: eval.work_root };
    let mut reference: Option<ReferenceSession> = None;
    let mut rng = StdRng::seed_from_u64(seed);
    for (job, compiled) in ready {
        if cancel.load(Ordering::SeqCst) {
            let _ = done.send(EvalDone::Skipped { code_hash: job.code_hash });
            continue;
        }
        if reference.is_none() {
            match ReferenceSession::start(eval.env, task, &settings, eval.work_root) {
                Ok(r) => reference = Some(r),
                Err(e) => {
                    let _ = done.send(EvalDone::ReferenceFailed { code_hash: job.code_hash, error: e.to_string(), at_start: true });
                    continue;
                }
            }
        }
        let session = reference.as_mut().expect("started above");
        tracing::info!(program = %job.candidate.label, %device, "evaluating");
        let event = match evaluate_candidate(&ctx, session, &job.candidate, &compiled, StdRng::from_rng(&mut rng)) {
            Ok(evaluation) => EvalDone::Finished { code_hash: job.code_hash, evaluation: Box::new(evaluation) },
            Err(e) => {
                // A reference that failed once is not trusted again: the next program starts a fresh one.
                if let Some(r) = reference.take() {
                    r.shutdown();
                }
                EvalDone::ReferenceFailed { code_hash: job.code_hash, error: e.to_string(), at_start: false }
            }
        };
        if done.send(event).is_err() {
            break;
        }
    }
    if let Some(r) = reference {
        r.shutdown();
    }
}
