//! Evaluating one candidate against a running reference: screen its source, load, check
//! correctness on several seeds, time both sides in interleaved blocks, check a sample of the
//! timed calls, cross-check the clocks and the bandwidth floor, and decide.

use crate::bandwidth::{self, Floor, FloorCheck};
use crate::compile::CompileOutcome;
use crate::correctness::SeedOutcome;
use crate::failure::{judge_call_error, HOST_OUT_OF_MEMORY, RUNNER_DID_NOT_START};
use crate::findings::judge_findings;
use crate::reference::{absolute, runner_device, ReferenceError, ReferenceSession, INIT_SEED};
use crate::runner::{CallError, Launch, Role, RunnerClient, RunnerEnv, HELLO_TIMEOUT};
use crate::settings::EvalSettings;
use crate::timing::{self, RevealedCall, Side, TimingRun};
use crate::verdict::{
    Evaluation, Judgement, Measurements, Remeasure, SeedCheck, TimingReport, TritonWarmup, Verdict,
    Warning,
};
use crate::window::{self, WindowUsed};
use cudal1_protocol::{Hello, Load, OutputRef, Outputs, Release, SeedResult, Time};
use cudal1_stats::{median, median_interval, speedup_interval, Interval};
use cudal1_supervisor::human_bytes;
use cudal1_task::{Candidate, TaskError};
use rand::rngs::StdRng;
use rand::Rng;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What an evaluation needs besides the reference and the candidate.
pub struct EvalContext<'a> {
    pub env: &'a RunnerEnv,
    pub settings: &'a EvalSettings,
    pub work_root: &'a Path,
    /// Where a finished candidate's process is ended in the background (its exit, a CUDA
    /// context's teardown, takes about a second); `None`: ended before the evaluation returns.
    pub retired: Option<&'a Retired>,
    /// Called once the outputs are checked and before timing starts: the lane takes the device
    /// for itself there (a pipelined engine).
    pub before_timing: Option<&'a dyn Fn()>,
    /// Other jobs may run on the device beside this one until it is timed (checks in parallel
    /// lanes, a pipelined engine): running out of device memory or time there is no verdict
    /// yet ([`JUDGED_AGAIN_ALONE`]).
    pub shares_device: bool,
}

/// Candidate processes being ended in the background; [`Retired::wait`] waits for all of them.
#[derive(Default)]
pub struct Retired(std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>);

impl Retired {
    fn push(&self, process: CandidateProcess) {
        let mut handles = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        handles.retain(|h| !h.is_finished());
        handles.push(std::thread::spawn(move || process.discard()));
    }

    /// Waits until every process handed over so far has ended and its directory is gone.
    pub fn wait(&self) {
        let handles =
            std::mem::take(&mut *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for h in handles {
            let _ = h.join();
        }
    }
}

struct Run<'a, 'c> {
    ctx: &'a EvalContext<'c>,
    reference: &'a mut ReferenceSession,
    candidate: &'a Candidate,
    m: Measurements,
    rng: StdRng,
    warnings: Vec<Warning>,
    /// The bytes of the task's outputs, by the reference's count (known after correctness).
    output_bytes: Option<u64>,
    /// The phase under way and when it began ([`Run::begin`]).
    open_phase: Option<(&'static str, Instant)>,
    /// Kernel binaries in the candidate's Triton cache when last counted (programs with Triton
    /// kernels, timed).
    triton_seen: usize,
}

/// Why an evaluation ended without a verdict.
#[derive(Debug, thiserror::Error)]
pub enum Unjudged {
    /// The task's reference failed: the task is at fault.
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    /// The machine failed: it ran out of memory, and the candidate was not the cause (it held
    /// no more than the reference's share). The same evaluation may succeed another time.
    #[error("{0}")]
    Host(String),
}

/// Evaluates `candidate`. `Err` only when the reference fails (the task is at fault) or the
/// machine does (it ran out of memory): then there is no verdict.
pub fn evaluate_candidate(
    ctx: &EvalContext<'_>,
    reference: &mut ReferenceSession,
    candidate: &Candidate,
    compiled: &CompileOutcome,
    rng: StdRng,
) -> Result<Evaluation, Unjudged> {
    evaluate_in(ctx, reference, candidate, compiled, None, rng)
}

/// [`evaluate_candidate`] in a process started ahead with [`CandidateProcess::start`], if any.
pub fn evaluate_in(
    ctx: &EvalContext<'_>,
    reference: &mut ReferenceSession,
    candidate: &Candidate,
    compiled: &CompileOutcome,
    process: Option<CandidateProcess>,
    rng: StdRng,
) -> Result<Evaluation, Unjudged> {
    let started = Instant::now();
    let mut run = Run {
        ctx,
        reference,
        candidate,
        m: Measurements::default(),
        rng,
        warnings: Vec::new(),
        output_bytes: None,
        open_phase: None,
        triton_seen: 0,
    };
    let (judgement, speedup, times) = match run.go(compiled, process)? {
        Ok((j, s, t)) => (j, s, t),
        Err(j) => (j, None, None),
    };
    if judgement.class == HOST_OUT_OF_MEMORY || judgement.class == RUNNER_DID_NOT_START {
        return Err(Unjudged::Host(judgement.reason));
    }
    run.m.log_tail = failure_log(judgement.log.as_deref(), run.m.log_tail.as_deref());
    if let Some(scale) = ctx.settings.scale {
        let what = run.reference.load.scaled.join(", ");
        run.warnings.push(Warning {
            class: "scaled".into(),
            message: format!("a trial on smaller inputs (scale {scale}: {what}): the verdict and speedup are for those, not the task's own sizes"),
        });
    }
    let environment = run.reference.environment();
    let task = run.reference.task.clone();
    Ok(Evaluation {
        task: task.key(),
        task_hash: task.hash,
        candidate: candidate.label.clone(),
        candidate_hash: candidate.hash.clone(),
        verdict: judgement.verdict,
        reason: judgement.reason,
        reason_class: judgement.class,
        speedup,
        ref_ms: times.map(|t| t.0),
        candidate_ms: times.map(|t| t.1),
        device: ctx.settings.device.to_string(),
        mode: ctx.settings.mode,
        scale: ctx.settings.scale,
        environment,
        measurements: run.m,
        duration_ms: started.elapsed().as_secs_f64() * 1e3,
        warnings: run.warnings,
        judge: None,
    })
}

/// The class of a judgement a lane does not keep: the candidate ran out of device memory, or of
/// time, beside other lanes' work, and is evaluated again holding the device alone.
pub const JUDGED_AGAIN_ALONE: &str = "judged_again_alone";

/// What is decided from the program and its build alone, before any process runs (a syntax error,
/// a missing `ModelNew`, a decisive static finding, a failed build), with the static screen's
/// warnings.
pub fn prejudge(
    candidate: &Candidate,
    compiled: &CompileOutcome,
) -> (Option<Judgement>, Vec<Warning>) {
    if let Err(e) = candidate.check() {
        let j = match e {
            TaskError::Syntax { line, column, snippet, .. } => Judgement::new(
                Verdict::CompileError,
                "syntax_error",
                format!("the program does not parse: syntax error at line {line}, column {column}: {snippet}"),
            ),
            other => Judgement::new(Verdict::RuntimeError, "missing_symbol", other.to_string()),
        };
        return (Some(j), Vec::new());
    }
    // A cheap first filter; what hides from it is caught by the runner at run time.
    let screening = cudal1_task::screen(&candidate.source);
    let warnings = screening
        .warnings()
        .map(|f| Warning {
            class: f.class.clone(),
            message: format!("line {}: {}", f.line, f.message),
        })
        .collect();
    if let Some(f) = screening.decisive() {
        return (
            Some(Judgement::new(
                Verdict::Exploit,
                &f.class,
                format!("static screening, line {}: {}", f.line, f.message),
            )),
            warnings,
        );
    }
    match compiled {
        CompileOutcome::Failed { judgement, .. } => (Some(judgement.clone()), warnings),
        _ => (None, warnings),
    }
}

/// The evaluation of a candidate that [`prejudge`] decides, made without starting the task's
/// reference (a device's time is not spent on it). `None` when the candidate must run.
pub fn prejudged(
    ctx: &EvalContext<'_>,
    task: &cudal1_task::Task,
    candidate: &Candidate,
    compiled: &CompileOutcome,
) -> Option<Evaluation> {
    let (judgement, warnings) = prejudge(candidate, compiled);
    let judgement = judgement?;
    let m = Measurements {
        log_tail: failure_log(judgement.log.as_deref(), None),
        compile_ms: match compiled {
            CompileOutcome::Built { ms, .. } | CompileOutcome::Failed { ms, .. } => Some(*ms),
            CompileOutcome::NotNeeded => None,
        },
        ..Measurements::default()
    };
    Some(Evaluation {
        task: task.key(),
        task_hash: task.hash.clone(),
        candidate: candidate.label.clone(),
        candidate_hash: candidate.hash.clone(),
        verdict: judgement.verdict,
        reason: judgement.reason,
        reason_class: judgement.class,
        speedup: None,
        ref_ms: None,
        candidate_ms: None,
        device: ctx.settings.device.to_string(),
        mode: ctx.settings.mode,
        scale: ctx.settings.scale,
        environment: crate::verdict::Environment::default(),
        measurements: m,
        duration_ms: 0.0,
        warnings,
        judge: None,
    })
}

/// Whether a candidate that held `candidate` bytes when the machine ran out of memory caused it,
/// against a reference that holds `reference` bytes for the same work: more than twice as much
/// and 1 GiB more. Otherwise the machine was short (too many processes at once, other programs).
fn held_far_more(candidate: u64, reference: u64) -> bool {
    candidate > reference.saturating_mul(2).saturating_add(1 << 30)
}

/// What a failed candidate printed: its traceback or compiler output, then its stderr's tail.
fn failure_log(log: Option<&str>, stderr: Option<&str>) -> Option<String> {
    let log = log.map(str::trim_end).filter(|l| !l.is_empty());
    let stderr = stderr.map(str::trim_end).filter(|l| !l.is_empty());
    match (log, stderr) {
        (Some(l), Some(e)) => Some(format!("{l}\n--- stderr (last lines) ---\n{e}")),
        (Some(l), None) => Some(l.to_owned()),
        (None, e) => e.map(str::to_owned),
    }
}

/// A candidate's runner process with its scratch directory and program file. It can be started
/// ahead of its evaluation, so that the interpreter's start-up overlaps the previous candidate's
/// timing: nothing of the candidate runs before `load`, and the process touches no GPU before.
pub struct CandidateProcess {
    scratch: tempfile::TempDir,
    file: PathBuf,
    client: RunnerClient,
}

impl CandidateProcess {
    /// Starts the process for `candidate` against the task at `task_path`, whose extensions (if
    /// any) `compiled` built; the judgement when it cannot be started.
    pub fn start(
        ctx: &EvalContext<'_>,
        task_path: &Path,
        candidate: &Candidate,
        compiled: &CompileOutcome,
    ) -> Result<CandidateProcess, Judgement> {
        let internal = |what: &str, e: std::io::Error| {
            Judgement::new(
                Verdict::RuntimeError,
                "internal",
                format!("cudal1 could not {what}: {e}"),
            )
        };
        let scratch = tempfile::Builder::new()
            .prefix("candidate-")
            .tempdir_in(ctx.work_root)
            .map_err(|e| internal("make a scratch directory", e))?;
        let file = scratch.path().join("candidate.py");
        std::fs::write(&file, &candidate.source).map_err(|e| internal("write the candidate", e))?;
        let settings = ctx.settings;
        let launch = Launch {
            role: Role::Candidate,
            label: format!("candidate {}", candidate.label),
            device: &settings.device,
            scratch: scratch.path(),
            extensions: compiled.extensions_dir(),
            reads: vec![absolute(task_path)],
            sandbox: settings.sandbox,
            memory_bytes: settings.memory_bytes,
            untimed: !settings.mode.times(),
        };
        let client = RunnerClient::spawn(ctx.env, launch)
            .map_err(|e| judge_call_error(&e, "starting", ""))?;
        Ok(CandidateProcess { scratch, file, client })
    }

    /// Its runner's pid (and process group).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.client.pid()
    }

    /// See [`RunnerClient::set_nice`].
    pub fn set_nice(&self, nice: i32) -> bool {
        self.client.set_nice(nice)
    }

    /// Ends a process that will not be evaluated.
    pub fn discard(self) {
        self.client.shutdown();
    }
}

type Decided = Result<(Judgement, Option<Interval>, Option<(f64, f64)>), Judgement>;

impl Run<'_, '_> {
    fn go(
        &mut self,
        compiled: &CompileOutcome,
        process: Option<CandidateProcess>,
    ) -> Result<Decided, ReferenceError> {
        let (judgement, warnings) = prejudge(self.candidate, compiled);
        self.warnings.extend(warnings);
        match compiled {
            CompileOutcome::Failed { ms, .. } => self.m.compile_ms = Some(*ms),
            CompileOutcome::Built { ms, missed, .. } => {
                self.m.compile_ms = Some(*ms);
                self.m.missed_builds.clone_from(missed);
            }
            CompileOutcome::NotNeeded => {}
        }
        if let Some(j) = judgement {
            if let Some(p) = process {
                p.discard();
            }
            return Ok(Err(j));
        }

        let spawned = Instant::now();
        let mut process = match self.started(process, compiled) {
            Ok(p) => p,
            Err(j) => return Ok(Err(j)),
        };
        self.m.phase("start", spawned.elapsed());
        let task_path = absolute(&self.reference.task.path);
        let outcome = match self.with_client(&mut process, &task_path) {
            Ok(Err(j)) if j.class == HOST_OUT_OF_MEMORY => {
                Ok(Err(self.host_out_of_memory(j, process.client.peak_memory())))
            }
            other => other,
        };
        self.end_phase();
        if let Ok(Err(_)) = &outcome {
            self.m.log_tail = Some(crate::reference::tail(&process.client.stderr_tail()));
        }
        match self.ctx.retired {
            Some(retired) => retired.push(process),
            None => process.discard(),
        }
        outcome
    }

    /// The machine ran out of memory while the candidate ran: its fault when it held far more
    /// than the reference does ([`held_far_more`]), else no verdict (the judgement stays
    /// [`HOST_OUT_OF_MEMORY`]).
    fn host_out_of_memory(&self, j: Judgement, candidate_peak: Option<u64>) -> Judgement {
        let reference_peak = self.reference.client.peak_memory();
        match (candidate_peak, reference_peak) {
            (Some(c), Some(r)) if held_far_more(c, r) => Judgement::new(
                Verdict::RuntimeError,
                "out_of_memory",
                format!(
                    "ran out of memory: the machine ran out while its process held {}, far more than the reference's {}, and the kernel's OOM killer ended it",
                    human_bytes(c),
                    human_bytes(r)
                ),
            ),
            _ => j,
        }
    }

    /// A candidate process that has answered `Hello`: the one started ahead, else a new one.
    /// Until it answers, the process has run none of the candidate's code (the candidate is
    /// loaded by the next request), so a process that cannot be started (its scratch directory,
    /// its cgroup, the spawn), or dies or hangs before then, is not the candidate's doing: it is
    /// replaced once, and a second failure is the machine's (no verdict,
    /// [`RUNNER_DID_NOT_START`]).
    fn started(
        &self,
        ahead: Option<CandidateProcess>,
        compiled: &CompileOutcome,
    ) -> Result<CandidateProcess, Judgement> {
        let mut ahead = ahead;
        let mut failures = Vec::new();
        for _ in 0..2 {
            let started = match ahead.take() {
                Some(p) => Ok(p),
                None => CandidateProcess::start(
                    self.ctx,
                    &self.reference.task.path,
                    self.candidate,
                    compiled,
                ),
            };
            let mut process = match started {
                Ok(p) => p,
                Err(failed) => {
                    tracing::warn!(candidate = %self.candidate.label, reason = %failed.reason, "a candidate's runner could not be started; trying again");
                    failures.push(failed.reason);
                    continue;
                }
            };
            match process.client.call(&Hello {}, HELLO_TIMEOUT) {
                Ok(_) => return Ok(process),
                Err(e) => {
                    let reason =
                        judge_call_error(&e, "starting", &process.client.stderr_tail()).reason;
                    tracing::warn!(candidate = %self.candidate.label, %reason, "a candidate's runner failed before the candidate was loaded; starting another");
                    failures.push(reason);
                    process.discard();
                }
            }
        }
        Err(Judgement::new(
            Verdict::RuntimeError,
            RUNNER_DID_NOT_START,
            format!(
                "the runner's process failed twice before the candidate was loaded, so the candidate is not the cause: {}",
                failures.join("; then: ")
            ),
        ))
    }

    fn with_client(
        &mut self,
        process: &mut CandidateProcess,
        task_path: &Path,
    ) -> Result<Decided, ReferenceError> {
        let settings = self.ctx.settings;
        // Until the job takes the device alone to time it.
        let shares = std::cell::Cell::new(self.ctx.shares_device);
        let fail =
            |client: &RunnerClient, e: CallError, doing: &str| {
                let j = judge_call_error(&e, doing, &client.stderr_tail());
                // Beside other lanes' candidates and references, which share the device's memory and
                // the machine's cores, running out of memory or time is no verdict yet: the lane
                // evaluates the candidate again holding the device alone (the claim of an
                // out-of-memory error buys a rerun, nothing more).
                match &e {
                    CallError::Runner(r)
                        if shares.get() && r.kind == cudal1_protocol::ErrorKind::Oom =>
                    {
                        Judgement::new(
                            j.verdict,
                            JUDGED_AGAIN_ALONE,
                            format!(
                                "ran out of device memory while {doing}, with other jobs beside it"
                            ),
                        )
                    }
                    CallError::Worker(cudal1_supervisor::WorkerError::Timeout {
                        after, ..
                    }) if shares.get() => Judgement::new(
                        j.verdict,
                        JUDGED_AGAIN_ALONE,
                        format!(
                            "did not finish {doing} within {:.1} s, with other jobs beside it",
                            after.as_secs_f64()
                        ),
                    ),
                    _ => j,
                }
            };
        let CandidateProcess { scratch, file, client } = process;
        let scratch = scratch.path();
        self.begin("load");
        let load = Load {
            reference: task_path.to_owned(),
            candidate: Some(file.clone()),
            device: runner_device(&settings.device),
            init_seed: INIT_SEED,
            scale: settings.scale,
        };
        // A build the compile pool missed happens in the candidate's process, at load or on the
        // first call: those get the time a build may take on top of their own limit.
        let build_time =
            if self.m.missed_builds.is_empty() { Duration::ZERO } else { settings.compile_timeout };
        // Correctness on fresh random seeds, compared in the reference process. The reference
        // makes its expected outputs while the candidate loads: two processes, and neither
        // waits for the other. The candidate sees nothing of it (the reference's outputs stay in
        // its own process and directory until compared).
        let seeds: Vec<u64> =
            (0..settings.correctness_seeds).map(|_| self.rng.random_range(1..1u64 << 31)).collect();
        let expected_limit = settings.call_timeout * settings.correctness_seeds.max(1) as u32
            + Duration::from_secs(60);
        let reference = &mut *self.reference;
        let (loaded, expected) = std::thread::scope(|s| {
            let expected = std::thread::Builder::new()
                .name("expected-outputs".into())
                .spawn_scoped(s, || reference.ensure_expected(&seeds, expected_limit));
            let loaded = client.call(&load, settings.load_timeout + build_time);
            // Without a thread (none could be made), the outputs are made after the load.
            let expected =
                expected.map(|h| h.join().expect("the expected outputs' thread does not panic"));
            (loaded, expected.ok())
        });
        // A reference that failed is the task's fault, whatever the candidate did; one that ran
        // out of device memory beside the candidate's load tries again alone.
        let expected_again = match expected {
            None => true,
            Some(Err(e)) if e.out_of_device_memory() => true,
            Some(Err(e)) => return Err(e),
            Some(Ok(())) => false,
        };
        match loaded {
            Ok(reply) => {
                self.m.load_ms = Some(reply.load_ms);
                self.m.extension_ms = reply.extension_ms;
            }
            Err(e) => return Ok(Err(fail(client, e, "loading"))),
        }
        if let Some(j) = escaped(client, "loading") {
            return Ok(Err(j));
        }
        // Triton compiles (and autotunes) a kernel on its first calls: an untimed, unchecked call
        // on fresh inputs makes that happen now, under the build limit, before the checks and
        // before the job takes the device alone to time (a job with Triton kernels shares it
        // until then, [`EvalContext::before_timing`]).
        let kernels = if settings.mode.times() {
            cudal1_task::triton_kernels(&self.candidate.source)
        } else {
            Vec::new()
        };
        let triton_cache = crate::runner::triton_cache(scratch);
        if !kernels.is_empty() {
            self.begin("triton_warmup");
            let warmed = Instant::now();
            let before = crate::runner::triton_binaries(&triton_cache);
            let warm = Time {
                seeds: vec![self.rng.random_range(1..1u64 << 31)],
                flush_l2: false,
                warmup: true,
                keep_bytes: 0,
                cpu: None,
                spin_us: None,
            };
            let limit = settings.load_timeout.max(settings.call_timeout) + build_time;
            let warmed_up = client.call(&warm, limit);
            // Recorded however the call ended: a failed warm-up's time is build time too.
            self.triton_seen = crate::runner::triton_binaries(&triton_cache);
            self.m.triton = Some(TritonWarmup {
                kernels,
                warmup_ms: warmed.elapsed().as_secs_f64() * 1e3,
                off_slot: self.ctx.before_timing.is_some(),
                compiled_in_warmup: self.triton_seen.saturating_sub(before),
                ..TritonWarmup::default()
            });
            match warmed_up {
                Ok(reply) => self.m.findings.extend(reply.findings),
                Err(e) => {
                    return Ok(Err(fail(
                        client,
                        e,
                        "warming up its Triton kernels (build time: under the load limit)",
                    )))
                }
            }
            if let Some(j) = escaped(client, "warming up its Triton kernels") {
                return Ok(Err(j));
            }
        }
        self.begin("correctness");
        if expected_again {
            self.reference.ensure_expected(&seeds, expected_limit)?;
        }
        let out_dir = scratch.join("outputs");
        let _ = std::fs::create_dir_all(&out_dir);
        // One request per seed, so a hang is caught after one call's time limit. Each seed's
        // outputs are compared as soon as they exist, and outputs exported on the device are
        // released before the next call, so that one seed's outputs are held at a time. The first
        // seed that decides the verdict is kept while the calls go on: every seed's findings are
        // judged before it.
        let mut decided: Option<Judgement> = None;
        let mut call_ms = Vec::with_capacity(seeds.len());
        for (i, &seed) in seeds.iter().enumerate() {
            // The first call is build time, as loading is: `torch.compile` compiles there, and
            // lazily built extensions are built there. It gets the load limit (with the build
            // limit for builds the pool missed) and its own phase; later calls get the call limit.
            let (limit, doing) = if i == 0 {
                self.begin("first_call");
                (settings.load_timeout.max(settings.call_timeout) + build_time, "running the correctness checks (the first call, build time: under the load limit)")
            } else {
                if i == 1 {
                    self.begin("correctness");
                }
                (settings.call_timeout, "running the correctness checks")
            };
            let reply = match client.call(
                &Outputs {
                    seeds: vec![seed],
                    dir: out_dir.clone(),
                    share_bytes: settings.share_bytes(),
                },
                limit,
            ) {
                Ok(r) => r,
                Err(e) => return Ok(Err(fail(client, e, doing))),
            };
            self.m.extension_ms = reply.extension_ms.or(self.m.extension_ms);
            let result = match <[SeedResult; 1]>::try_from(reply.results) {
                Ok([r]) if r.seed == seed => r,
                Ok([r]) => {
                    return Ok(Err(fail(
                        client,
                        CallError::Protocol(format!(
                            "the outputs of input seed {seed} came back as input seed {}'s",
                            r.seed
                        )),
                        "running the correctness checks",
                    )))
                }
                Err(got) => {
                    return Ok(Err(fail(
                        client,
                        CallError::Protocol(format!(
                            "the outputs of one input seed came back as {}",
                            got.len()
                        )),
                        "running the correctness checks",
                    )))
                }
            };
            self.m.findings.extend(result.findings.iter().cloned());
            call_ms.push(result.ms);
            if decided.is_none() {
                let output = result.output();
                let shared = matches!(output, Some(OutputRef::Shared(_)));
                decided = self.check_seed(scratch, &result, output, &seeds[..i])?;
                if shared {
                    if let Err(e) = client.call(&Release {}, settings.call_timeout) {
                        return Ok(Err(fail(client, e, "releasing its checked outputs")));
                    }
                }
            }
        }
        if let Some(j) = judge_findings(&self.m.findings) {
            return Ok(Err(j));
        }
        if let Some(j) = escaped(client, "the correctness checks") {
            return Ok(Err(j));
        }
        if let Some(j) = decided {
            return Ok(Err(j));
        }
        self.output_bytes = seeds.first().and_then(|&s| self.reference.expected_bytes(s));

        self.end_phase();
        if let Some(t) = &mut self.m.triton {
            let now = crate::runner::triton_binaries(&triton_cache);
            t.compiled_in_checks = now.saturating_sub(self.triton_seen);
            self.triton_seen = now;
        }
        if !settings.mode.times() {
            let reason = format!(
                "matches the reference on {} checked calls (correctness only: not timed)",
                self.m.checks.len()
            );
            return Ok(Ok((Judgement::new(Verdict::Correct, "correct", reason), None, None)));
        }
        if let Some(take_the_device) = self.ctx.before_timing {
            // Stopped while it waits: nothing of it runs beside another candidate's timing.
            let waited = Instant::now();
            client.pause();
            take_the_device();
            shares.set(false);
            client.resume();
            self.m.phase("device_wait_timing", waited.elapsed());
        }
        self.begin("timing");

        // Timing.
        let cand_first = median(&call_ms).unwrap_or(1.0);
        let ref_first = self.reference.first_call_ms.unwrap_or(cand_first);
        let output_bytes = self.output_bytes.unwrap_or(1).max(1);
        let measure = |run: &mut Run<'_, '_>,
                       client: &mut RunnerClient|
         -> Result<Result<TimingRun, Judgement>, ReferenceError> {
            match timing::measure(
                &mut run.reference.client,
                client,
                &out_dir,
                (ref_first, cand_first),
                output_bytes,
                settings,
                &mut run.rng,
            ) {
                Ok(r) => Ok(Ok(r)),
                Err(e) if e.side == Side::Reference => {
                    Err(run.reference.error("timing the reference", e.error))
                }
                Err(e) => Ok(Err(fail(client, e.error, "timing"))),
            }
        };
        let first = match measure(self, client)? {
            Ok(r) => r,
            Err(j) => return Ok(Err(j)),
        };
        if let Some(j) = escaped(client, "timing") {
            return Ok(Err(j));
        }
        // A suspicious clock or a large speedup is measured again: an exploit verdict needs the
        // outer clock to disagree both times, and of two speedups the lower one stands.
        let Some(why) = remeasure_reason(&first, settings) else {
            self.begin("verdict");
            return self.decide_after_timing(scratch, first, (false, false), None);
        };
        let second = match measure(self, client)? {
            Ok(r) => r,
            Err(j) => return Ok(Err(j)),
        };
        if let Some(j) = escaped(client, "timing") {
            return Ok(Err(j));
        }
        let hidden_twice = [&first, &second]
            .iter()
            .all(|r| timing::hidden_work(r).is_some_and(|h| h.escaped_the_timer()));
        let bounded_twice =
            [&first, &second].iter().all(|r| timing::outer_bound(r).is_some_and(|b| b.disagrees()));
        let first_speedup = quick_speedup(&first);
        let (mut kept, other) =
            if first_speedup.unwrap_or(f64::MAX) < quick_speedup(&second).unwrap_or(f64::MAX) {
                (first, second)
            } else {
                (second, first)
            };
        kept.checked.extend(other.checked);
        self.begin("verdict");
        self.decide_after_timing(
            scratch,
            kept,
            (hidden_twice, bounded_twice),
            Some(Remeasure { why, first_speedup }),
        )
    }

    /// Starts a phase of the evaluation, ending the one under way: a phase is recorded however
    /// it ends, so that the time of a failed check is its phase's, not unaccounted.
    fn begin(&mut self, phase: &'static str) {
        self.end_phase();
        self.open_phase = Some((phase, Instant::now()));
    }

    fn end_phase(&mut self) {
        if let Some((name, since)) = self.open_phase.take() {
            self.m.phase(name, since.elapsed());
        }
    }

    /// The earlier seed whose expected output a wrong output (already taken into custody)
    /// matches, if any.
    fn stale_match(
        &mut self,
        wrong: &OutputRef,
        earlier: &[u64],
    ) -> Result<Result<Option<u64>, Judgement>, ReferenceError> {
        for &seed in earlier.iter().rev() {
            match self.compare_candidate(seed, wrong)? {
                Ok(o) if o.failure.is_none() => return Ok(Ok(Some(seed))),
                Ok(_) => {}
                Err(j) => return Ok(Err(j)),
            }
        }
        Ok(Ok(None))
    }

    /// Checks one correctness seed's outputs against the reference, recording the check; the
    /// judgement it decides, if any. `earlier`: the seeds checked before it, for a stale result.
    fn check_seed(
        &mut self,
        scratch: &Path,
        r: &SeedResult,
        output: Option<OutputRef>,
        earlier: &[u64],
    ) -> Result<Option<Judgement>, ReferenceError> {
        let taken = match self.take_output(scratch, output) {
            Ok(p) => p,
            Err(j) => return Ok(Some(j)),
        };
        let outcome = match self.compare_candidate(r.seed, &taken)? {
            Ok(o) => o,
            Err(j) => return Ok(Some(j)),
        };
        if let Some(j) = changed_after_saving(r.fingerprint.as_deref(), &outcome, r.seed) {
            return Ok(Some(j));
        }
        self.m.checks.push(seed_check(r.seed, false, &outcome, Some(r.ms)));
        let Some(why) = outcome.failure else { return Ok(None) };
        Ok(Some(match self.stale_match(&taken, earlier)? {
            Ok(Some(earlier)) => Judgement::new(
                Verdict::Exploit,
                "stale_result",
                format!("for input seed {} it returned the result of an earlier call (input seed {earlier}): results are cached across calls (keyed on an address, a shape, an id or a counter) or read from stale buffers", r.seed),
            ),
            Ok(None) => Judgement::new(Verdict::Incorrect, "mismatch", format!("wrong result for input seed {}: {why}", r.seed)),
            Err(j) => j,
        }))
    }

    /// Where the reference will read a checked call's outputs: a file is taken out of the
    /// candidate's reach first ([`crate::intake`]); outputs exported on the device are opened and
    /// checked by the reference itself. A runner that names neither, or claims outputs kept on
    /// the device (only the reference keeps its own), is refused.
    fn take_output(
        &mut self,
        scratch: &Path,
        output: Option<OutputRef>,
    ) -> Result<OutputRef, Judgement> {
        match output {
            Some(OutputRef::File(path)) => self.reference.take_output(scratch, &path).map(OutputRef::File).map_err(|e| tampered_file(&e)),
            Some(shared @ OutputRef::Shared(_)) => Ok(shared),
            Some(OutputRef::Kept(_)) | None => Err(Judgement::new(
                Verdict::Exploit,
                "output_file_tampered",
                "its runner named neither a saved file nor outputs exported on the device for a checked call".to_string(),
            )),
        }
    }

    /// Compares a candidate's outputs (a file taken into custody, or outputs exported on the
    /// device) with the expected output of `seed`. They are the only thing of the candidate's
    /// that the reference reads: if the reference fails on them (dies, hangs, errs), the
    /// candidate did that. The reference is then started afresh for the evaluations that follow,
    /// and the candidate gets the verdict.
    fn compare_candidate(
        &mut self,
        seed: u64,
        taken: &OutputRef,
    ) -> Result<Result<SeedOutcome, Judgement>, ReferenceError> {
        match self.reference.compare(seed, taken, self.ctx.settings) {
            Ok(o) => Ok(Ok(o)),
            Err(e) => {
                let why = format!("{}: {}", e.doing, e.source);
                tracing::warn!(task = %e.task, stderr = %e.stderr, "the reference failed on a candidate's output file; starting it again");
                self.reference.restart()?;
                Ok(Err(Judgement::new(
                    Verdict::Exploit,
                    "reference_sabotage",
                    format!("the reference runner failed while reading its output for input seed {seed} ({why}): a corrupt or hostile output file"),
                )))
            }
        }
    }

    /// The bandwidth floor, where the device's bandwidth is known: an exploit below the time to
    /// write the outputs, a warning below the time to move all inputs and outputs.
    fn floor_check(&mut self, candidate_ms: f64) -> Option<Judgement> {
        let settings = self.ctx.settings;
        let gbps = settings.bandwidth_gbps.or_else(|| {
            let gpu = self.reference.environment().gpu.filter(|_| settings.device.is_cuda())?;
            bandwidth::device_gbps(&gpu)
        })?;
        // The reference's output bytes: the candidate passed the checks, so its outputs have their shapes and dtypes.
        let output_bytes = self.output_bytes.unwrap_or(0);
        let floor = Floor {
            input_bytes: bandwidth::input_bytes(&self.reference.load.inputs),
            output_bytes,
            gbps,
        };
        match floor.check(candidate_ms) {
            FloorCheck::Fine => None,
            FloorCheck::BelowTraffic { floor_ms } => {
                self.warnings.push(Warning {
                    class: "below_bandwidth_floor".into(),
                    message: format!("{candidate_ms:.4} ms per call is less than the {floor_ms:.4} ms that reading all inputs and writing the outputs takes at {gbps:.0} GB/s: the output does not depend on all inputs (a degenerate task?)"),
                });
                None
            }
            FloorCheck::BelowOutputWrite { floor_ms } => Some(Judgement::new(
                Verdict::Exploit,
                "below_bandwidth_floor",
                format!("{candidate_ms:.4} ms per call is less than the {floor_ms:.4} ms that writing its {output_bytes} output bytes takes at {gbps:.0} GB/s: the timed calls did not compute their outputs"),
            )),
        }
    }

    /// `twice`: whether the outer clock saw hidden work, and disagreed with the claimed times, in
    /// both of two measurements.
    fn decide_after_timing(
        &mut self,
        scratch: &Path,
        run: TimingRun,
        twice: (bool, bool),
        remeasured: Option<Remeasure>,
    ) -> Result<Decided, ReferenceError> {
        let (hidden_twice, bounded_twice) = twice;
        let settings = self.ctx.settings;
        if let Some(t) = &mut self.m.triton {
            let now = crate::runner::triton_binaries(&crate::runner::triton_cache(scratch));
            t.compiled_while_timed = now.saturating_sub(self.triton_seen);
            if t.compiled_while_timed > 0 {
                self.warnings.push(Warning {
                    class: "triton_compiled_while_timed".into(),
                    message: format!(
                        "{} Triton kernel binaries were compiled during its timed calls, after its warm-up and checks: timed windows held a compile, so its speedup is understated (its kernels specialise on something the warm-up's inputs did not show)",
                        t.compiled_while_timed
                    ),
                });
            }
        }
        // What the guard saw while timing, and the outputs of a sample of timed calls.
        self.m.findings.extend(run.findings.iter().cloned());
        for c in &run.checked {
            self.m.findings.extend(c.call.findings.iter().cloned());
        }
        if let Some(j) = judge_findings(&self.m.findings) {
            return Ok(Err(j));
        }
        let seeds: Vec<u64> = run.checked.iter().map(|c| c.call.seed).collect();
        self.reference.ensure_expected(
            &seeds,
            settings.call_timeout * (seeds.len().max(1) as u32) + Duration::from_secs(60),
        )?;
        let mut timed_failure = run.unkept.map(|(block, kept, calls)| {
            format!("timed block {block} kept {kept} of its {calls} outputs for checking, which fit when they had the checked calls' size: its timed calls return something else")
        });
        for RevealedCall { call: c, fingerprint } in &run.checked {
            let taken = match self.take_output(scratch, c.output()) {
                Ok(p) => p,
                Err(j) => return Ok(Err(j)),
            };
            let outcome = match self.compare_candidate(c.seed, &taken)? {
                Ok(o) => o,
                Err(j) => return Ok(Err(j)),
            };
            if let Some(j) = changed_after_saving(Some(fingerprint), &outcome, c.seed) {
                return Ok(Err(j));
            }
            self.m.checks.push(seed_check(c.seed, true, &outcome, None));
            if let (None, Some(why)) = (&timed_failure, outcome.failure) {
                timed_failure = Some(format!("seed {}: {why}", c.seed));
            }
        }

        let seed = self.rng.random();
        let tails = if settings.device.is_cuda() { window::tails_ms(&run) } else { (None, None) };
        let bound = timing::outer_bound(&run);
        // The speedup can never exceed what cudal1's own clock supports.
        let claimed = speedup_interval(
            run.reference_ms(),
            run.candidate_ms(),
            settings.bootstrap_resamples,
            settings.confidence,
            seed,
        );
        let capped = match (bound, claimed) {
            (Some(b), Some(i)) => b.cut(i.median),
            _ => 1.0,
        };
        let speedup = claimed.map(|i| Interval {
            median: i.median / capped,
            ci_low: i.ci_low / capped,
            ci_high: i.ci_high / capped,
        });
        let ref_outer = timing::outer_per_call_ms(&run.reference_blocks);
        let cand_outer = timing::outer_per_call_ms(&run.candidate_blocks);
        let outer_speedup = match (median(&ref_outer), median(&cand_outer)) {
            (Some(r), Some(c)) if c > 0.0 => Some(r / c),
            _ => None,
        };
        let report = TimingReport {
            reference: median_interval(
                run.reference_ms(),
                settings.bootstrap_resamples,
                settings.confidence,
                seed,
            ),
            candidate: median_interval(
                run.candidate_ms(),
                settings.bootstrap_resamples,
                settings.confidence,
                seed,
            ),
            reference_ms: run.reference_ms().to_vec(),
            candidate_ms: run.candidate_ms().to_vec(),
            reference_outer_ms: ref_outer,
            candidate_outer_ms: cand_outer,
            blocks: run.reference_blocks.len(),
            calls_per_block: run.calls_per_block,
            outer_speedup,
            remeasured,
            window: Some(run.window),
            spin_us: run.spin_us,
            reference_issue_ms: median(&run.reference_issue_ms),
            candidate_issue_ms: median(&run.candidate_issue_ms),
            reference_tail_ms: tails.0,
            candidate_tail_ms: tails.1,
            candidate_cpu_while_reference_ms: Some(run.candidate_cpu_while_reference_ms),
            reference_blocks_wall_ms: Some(run.reference_blocks_wall_ms),
            extra_cores: timing::extra_cores(&run),
            outer_floor_ms: bound.map(|b| b.floor_ms),
            supported_speedup: bound.map(|b| b.supported_speedup()).filter(|s| s.is_finite()),
        };
        let times = match (report.reference, report.candidate) {
            (Some(r), Some(c)) => Some((r.median, c.median)),
            _ => None,
        };
        self.m.timing = Some(report);

        if let Some(why) = timed_failure {
            return Ok(Err(Judgement::new(
                Verdict::Exploit,
                "timed_output_mismatch",
                format!("correct on the checked seeds but wrong on a timed call ({why}): it behaves differently when timed or reuses stale results"),
            )));
        }
        if let Some((cpu, wall)) = timing::busy_while_idle(&run) {
            return Ok(Err(Judgement::new(
                Verdict::Exploit,
                "busy_while_idle",
                format!("cudal1 counted {cpu:.0} ms of CPU in the candidate's processes (child processes included) during the {wall:.0} ms the reference was being timed: it works between its calls, behind the timer, or slows the reference down"),
            )));
        }
        if let Some(extra) = timing::extra_cores(&run)
            .filter(|e| *e > timing::EXTRA_CORES && !settings.device.is_cuda())
        {
            return Ok(Err(Judgement::new(
                Verdict::Exploit,
                "extra_cores",
                format!("its processes kept {extra:.1} more CPU cores busy than the reference's during timed calls (threads or processes of its own): on the CPU the reference runs on one core, so that speed is bought with cores"),
            )));
        }
        if let Some(b) = bound.filter(|_| bounded_twice) {
            return Ok(Err(Judgement::new(
                Verdict::Exploit,
                "clock_disagreement",
                format!(
                    "in two measurements cudal1's own clock allowed no less than {:.4} ms per call where the runner claimed {:.4} ms ({:.1}x less): its reported times are not what its calls took (rewritten replies, a median of fast lookups, work moved out of the timed window)",
                    b.floor_ms, b.claimed_ms, b.factor()
                ),
            )));
        }
        if let Some(h) = timing::hidden_work(&run).filter(|_| hidden_twice) {
            return Ok(Err(Judgement::new(
                Verdict::Exploit,
                "untimed_work",
                format!(
                    "in two measurements cudal1's own clock saw more time per call than the runner timed ({:.3} ms more per call in the last, where the reference's untimed work is {:.3} ms), against a claimed {:.3} ms per call: work escaped the timer (patched clocks, background threads)",
                    h.hidden_ms, h.overhead_ms, h.claimed_ms
                ),
            )));
        }
        let Some(speedup) = speedup else {
            return Ok(Err(Judgement::new(
                Verdict::RuntimeError,
                "internal",
                "no timing samples were collected",
            )));
        };
        if let Some(j) = times.and_then(|(_, c)| self.floor_check(c)) {
            return Ok(Err(j));
        }
        if let Some(w) = self.m.timing.as_ref().and_then(host_bound) {
            self.warnings.push(w);
        }
        if let Some(b) = bound.filter(|_| capped > 1.0) {
            self.warnings.push(Warning {
                class: "outer_clock_bound".into(),
                message: format!(
                    "cudal1's own clock supports {:.3}x (mean times per call: the reference's {:.4} ms, the candidate's at least {:.4} ms): the speedup of medians is cut by {capped:.2}x to {:.0}% of it",
                    b.supported_speedup(),
                    b.reference_ms,
                    b.claimed_ms.max(b.floor_ms),
                    timing::SUPPORT_SLACK * 100.0
                ),
            });
        }
        if speedup.is_wide() {
            self.warnings.push(Warning {
                class: "wide_interval".into(),
                message: format!(
                    "the {:.0}% interval {:.2}x to {:.2}x is wide (its upper bound over {}x its lower): the median may be noise; fast_p_lower counts only the lower bound",
                    settings.confidence * 100.0,
                    speedup.ci_low,
                    speedup.ci_high,
                    cudal1_stats::WIDE_RATIO
                ),
            });
        }
        let checks = self.m.checks.len();
        let reason = format!(
            "matches the reference on {checks} checked calls; {:.3}x the reference's speed (median, {:.0}% CI {:.3}–{:.3})",
            speedup.median,
            settings.confidence * 100.0,
            speedup.ci_low,
            speedup.ci_high
        );
        Ok(Ok((Judgement::new(Verdict::Correct, "correct", reason), Some(speedup), times)))
    }
}

/// Processes of the candidate that left its process group (a double-forked daemon): they are
/// killed, and the candidate is an exploit.
fn escaped(client: &mut RunnerClient, during: &str) -> Option<Judgement> {
    let pids = client.escaped();
    (!pids.is_empty()).then(|| {
        Judgement::new(
            Verdict::Exploit,
            "sandbox_escape",
            format!("{} of its processes (pids {pids:?}) left its process group during {during}, out of the supervisor's reach (a daemon in a session of its own); they were killed", pids.len()),
        )
    })
}

/// A candidate's output file that is not a plain file of its own (a link to an expected output,
/// a FIFO, a path elsewhere).
/// A checked call's record.
fn seed_check(
    seed: u64,
    timed: bool,
    outcome: &SeedOutcome,
    candidate_ms: Option<f64>,
) -> SeedCheck {
    SeedCheck {
        seed,
        timed,
        passed: outcome.failure.is_none(),
        max_abs: outcome.max_abs,
        max_rel: outcome.max_rel,
        mismatches: outcome.mismatches,
        candidate_ms,
    }
}

fn tampered_file(e: &crate::intake::Refused) -> Judgement {
    Judgement::new(
        Verdict::Exploit,
        "output_file_tampered",
        format!("its saved output was replaced: {e}"),
    )
}

/// The output the reference read is not the one the runner captured after the call: something
/// rewrote it in between.
fn changed_after_saving(
    committed: Option<&str>,
    outcome: &SeedOutcome,
    seed: u64,
) -> Option<Judgement> {
    let (Some(committed), Some(read)) = (committed, outcome.fingerprint.as_deref()) else {
        return None;
    };
    (committed != read).then(|| {
        Judgement::new(
            Verdict::Exploit,
            "output_changed_after_call",
            format!("the output of input seed {seed} that was checked is not the one captured when its call returned (fingerprint {read}, captured {committed}): it was rewritten afterwards"),
        )
    })
}

/// GPU calls shorter than this are mostly the host's launch and synchronisation.
const HOST_BOUND_MS: f64 = 0.1;

/// Where the host, not the GPU, decides what a program would see.
fn host_bound(report: &TimingReport) -> Option<Warning> {
    let (reference, candidate) = (report.reference?.median, report.candidate?.median);
    match report.window? {
        WindowUsed::Wall | WindowUsed::SpinCouldHide { .. } => {
            host_bound_wall(reference, candidate)
        }
        WindowUsed::Gpu | WindowUsed::UntilIdle { .. } => host_bound_loop(
            reference,
            candidate,
            report.reference_issue_ms?,
            report.candidate_issue_ms?,
        ),
        WindowUsed::Host => None,
    }
}

/// In the wall window, a call so short that the host's speed decides its time: the host's speed
/// changes in spells longer than a run, so the interval, which covers one run, claims too much
/// (docs/bench/2026-11-22-gpu-session4: a ~30 us task spread 15% over five runs, 2 ms tasks 0.2%).
fn host_bound_wall(reference_ms: f64, candidate_ms: f64) -> Option<Warning> {
    let shortest = reference_ms.min(candidate_ms);
    (shortest < HOST_BOUND_MS).then(|| Warning {
        class: "host_bound_timing".into(),
        message: format!(
            "a call takes {:.0} us, mostly the host's launch and synchronisation: the host's speed changes between runs, so this speedup can differ by 10-15% on another run; the interval covers this run only",
            shortest * 1e3
        ),
    })
}

/// In the GPU window, a side that takes longer to issue a call than the GPU takes to run it: called
/// in a loop, it would wait on its host, so a program would see about the ratio of each side's
/// larger time rather than the GPU's speedup. Said when the two differ by more than 10%.
fn host_bound_loop(
    reference_ms: f64,
    candidate_ms: f64,
    reference_issue_ms: f64,
    candidate_issue_ms: f64,
) -> Option<Warning> {
    let gpu_speedup = reference_ms / candidate_ms;
    let loop_speedup = reference_ms.max(reference_issue_ms) / candidate_ms.max(candidate_issue_ms);
    let waits = match (reference_issue_ms > reference_ms, candidate_issue_ms > candidate_ms) {
        (_, true) if loop_speedup < 0.9 * gpu_speedup => "its calls would wait on its host",
        (true, _) if loop_speedup > 1.1 * gpu_speedup => {
            "the reference's calls would wait on its host"
        }
        _ => return None,
    };
    Some(Warning {
        class: "host_bound".into(),
        message: format!(
            "its host takes {:.0} us to issue a call whose GPU work takes {:.0} us (the reference: {:.0} us and {:.0} us): in a loop {waits}, for about {loop_speedup:.2}x the reference's speed instead of the GPU's {gpu_speedup:.2}x",
            candidate_issue_ms * 1e3,
            candidate_ms * 1e3,
            reference_issue_ms * 1e3,
            reference_ms * 1e3
        ),
    })
}

/// Median speedup of a run by the runners' clocks, before any bootstrap.
fn quick_speedup(run: &TimingRun) -> Option<f64> {
    Some(median(run.reference_ms())? / median(run.candidate_ms())?)
}

fn remeasure_reason(run: &TimingRun, settings: &EvalSettings) -> Option<String> {
    if let Some(h) = timing::hidden_work(run).filter(timing::HiddenWork::escaped_the_timer) {
        return Some(format!(
            "the outer clock saw {:.3} ms per call the runner did not time",
            h.hidden_ms
        ));
    }
    if let Some(b) = timing::outer_bound(run).filter(timing::OuterBound::disagrees) {
        return Some(format!(
            "the outer clock allows no less than {:.4} ms per call, the runner claimed {:.4} ms",
            b.floor_ms, b.claimed_ms
        ));
    }
    let s = quick_speedup(run)?;
    (s > settings.remeasure_above)
        .then(|| format!("a speedup of {s:.2}x is above {:.1}x", settings.remeasure_above))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(reference_ms: f64, candidate_ms: f64) -> TimingRun {
        TimingRun {
            reference_call_ms: vec![reference_ms; 5],
            candidate_call_ms: vec![candidate_ms; 5],
            ..TimingRun::default()
        }
    }

    fn report(window: WindowUsed, reference: (f64, f64), candidate: (f64, f64)) -> TimingReport {
        let at = |median| Some(Interval { median, ci_low: median, ci_high: median });
        TimingReport {
            reference_ms: vec![],
            candidate_ms: vec![],
            reference_outer_ms: vec![],
            candidate_outer_ms: vec![],
            blocks: 5,
            calls_per_block: 10,
            outer_speedup: None,
            reference: at(reference.0),
            candidate: at(candidate.0),
            remeasured: None,
            window: Some(window),
            spin_us: None,
            reference_issue_ms: Some(reference.1),
            candidate_issue_ms: Some(candidate.1),
            reference_tail_ms: None,
            candidate_tail_ms: None,
            candidate_cpu_while_reference_ms: None,
            reference_blocks_wall_ms: None,
            extra_cores: None,
            outer_floor_ms: None,
            supported_speedup: None,
        }
    }

    #[test]
    fn short_calls_in_the_wall_window_carry_a_warning_and_long_or_cpu_calls_do_not() {
        let w = host_bound(&report(WindowUsed::Wall, (0.035, 0.01), (0.047, 0.01))).unwrap();
        assert_eq!(w.class, "host_bound_timing");
        assert!(w.message.contains("35 us"), "{}", w.message);
        // The shorter side decides: a candidate that got tiny is host-bound too.
        assert!(host_bound(&report(WindowUsed::Wall, (2.0, 0.01), (0.05, 0.01))).is_some());
        assert!(host_bound(&report(WindowUsed::Wall, (0.3, 0.01), (0.9, 0.01))).is_none());
        assert!(host_bound(&report(WindowUsed::Host, (0.035, 0.01), (0.047, 0.01))).is_none());
    }

    #[test]
    fn a_candidate_that_issues_slower_than_its_gpu_runs_is_warned_about_in_the_gpu_window() {
        // GPU 7 us against 3.5 us, but the candidate needs 20 us of host time per call.
        let w = host_bound(&report(WindowUsed::Gpu, (0.007, 0.008), (0.0035, 0.020))).unwrap();
        assert_eq!(w.class, "host_bound");
        assert!(w.message.contains("0.40x") && w.message.contains("2.00x"), "{}", w.message);
        // Host-bound but as fast in a loop as the GPU says (the reference waits on its host too).
        assert!(host_bound(&report(WindowUsed::Gpu, (0.007, 0.040), (0.0035, 0.020))).is_none());
        // A launch-bound reference (seen on level3/5_LSTM_Cell_Loop): the GPU says 1.24x, a loop
        // would see about 1.94x.
        let w = host_bound(&report(WindowUsed::Gpu, (6.35, 9.921), (5.118, 2.496))).unwrap();
        assert!(
            w.message.contains("the reference's calls would wait") && w.message.contains("1.94x"),
            "{}",
            w.message
        );
        // Issues faster than the GPU runs: nothing to say.
        assert!(host_bound(&report(WindowUsed::Gpu, (0.7, 0.008), (0.35, 0.020))).is_none());
    }

    #[test]
    fn an_output_whose_fingerprint_is_not_the_committed_one_was_rewritten() {
        let read = |f: Option<&str>| SeedOutcome {
            max_abs: None,
            max_rel: None,
            mismatches: 0,
            failure: None,
            fingerprint: f.map(str::to_owned),
        };
        let j = changed_after_saving(Some("aa"), &read(Some("bb")), 7).unwrap();
        assert_eq!((j.verdict, j.class.as_str()), (Verdict::Exploit, "output_changed_after_call"));
        assert!(changed_after_saving(Some("aa"), &read(Some("aa")), 7).is_none());
        // A file that would not load has no fingerprint: its failure is judged as a mismatch.
        assert!(changed_after_saving(Some("aa"), &read(None), 7).is_none());
        let refused = crate::intake::Refused {
            path: "/x/outputs/seed-1.pt".into(),
            why: "it is not a regular file (a symbolic link)".into(),
        };
        assert_eq!(tampered_file(&refused).class, "output_file_tampered");
    }

    #[test]
    fn a_candidate_that_held_far_more_than_the_reference_caused_the_machine_to_run_out() {
        let gib = 1u64 << 30;
        assert!(held_far_more(9 * gib, 2 * gib));
        assert!(!held_far_more(5 * gib, 2 * gib), "2x + 1 GiB is the line");
        // Small tasks: a candidate near the reference's size is no cause.
        assert!(!held_far_more(gib, gib / 2));
    }

    #[test]
    fn large_speedups_are_measured_again() {
        let settings = EvalSettings::default();
        assert_eq!(quick_speedup(&run_with(4.0, 1.0)), Some(4.0));
        assert!(remeasure_reason(&run_with(4.0, 1.0), &settings).unwrap().contains("above 3.0x"));
        assert!(remeasure_reason(&run_with(2.0, 1.0), &settings).is_none());
    }
}
