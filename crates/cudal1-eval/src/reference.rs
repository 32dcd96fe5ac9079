//! The trusted side of an evaluation: one reference runner per task and device, reused across
//! that task's candidates. It makes expected outputs (kept in a directory no candidate can read
//! or write), takes candidates' output files out of their reach before comparing them
//! ([`crate::intake`]), compares them with the expected ones and times the reference.

use crate::correctness::{distinct_tolerances, judge, SeedOutcome};
use crate::runner::{CallError, Launch, Role, RunnerClient, RunnerEnv};
use crate::settings::{Device, EvalSettings};
use crate::verdict::Environment;
use cudal1_protocol::{
    Compare, Describe, DescribeReply, DeviceInfo, Expected, Hello, HelloReply, Load, LoadReply,
    OutputRef, Release,
};
use cudal1_task::Task;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// KernelBench builds both models after seeding with the same value; any fixed value will do.
pub const INIT_SEED: u64 = 42;

/// The reference program could not be run: the task is at fault, not a candidate.
#[derive(Debug, thiserror::Error)]
#[error("the reference `{task}` failed while {doing}: {source}\n{stderr}")]
pub struct ReferenceError {
    pub task: String,
    pub doing: &'static str,
    #[source]
    pub source: CallError,
    pub stderr: String,
}

impl ReferenceError {
    /// What can be done about it, where something can (a task too large for the machine).
    pub fn remedies(&self) -> Vec<crate::memory::Remedy> {
        self.source.remedies()
    }

    /// It failed before running any call: no candidate of this task can be judged.
    pub fn at_start(&self) -> bool {
        AT_START.contains(&self.doing)
    }

    /// The device ran out of memory in one of its calls (the process lives on).
    pub fn out_of_device_memory(&self) -> bool {
        matches!(&self.source, CallError::Runner(r) if r.kind == cudal1_protocol::ErrorKind::Oom)
    }

    /// The machine ran out of memory under it (the kernel's OOM killer, not a limit of ours):
    /// the task is not necessarily at fault.
    pub fn host_out_of_memory(&self) -> bool {
        crate::failure::host_out_of_memory(&self.source)
    }
}

/// What [`ReferenceSession::start`] is doing when it fails.
const AT_START: [&str; 4] = ["creating its work directory", "starting", FITTING, "loading"];

/// The step where a task too large for the machine is refused ([`crate::memory`]).
const FITTING: &str = "checking that it fits in memory";

pub struct ReferenceSession {
    pub task: Task,
    pub device: Device,
    pub client: RunnerClient,
    pub hello: HelloReply,
    pub load: LoadReply,
    /// Private: expected outputs live here, outside every candidate's readable paths.
    dir: tempfile::TempDir,
    /// Each seed's expected outputs: a file in `dir`, or kept on the reference's device.
    expected: HashMap<u64, Expectation>,
    /// Candidates' output files taken into custody ([`ReferenceSession::take_output`]).
    taken: u64,
    /// Eager time of the reference's correctness calls, a first estimate of its speed.
    pub first_call_ms: Option<f64>,
    /// The most device memory the process has held for this task, as its `expected` replies
    /// said (on a GPU; the runner resets it when a task loads).
    pub device_peak: Option<u64>,
    /// Whether the process loaded another task before this one ([`ReferenceSession::reload`]):
    /// such a reference checks outputs but is never timed.
    pub reloaded: bool,
    /// Whether the process was started for checks that are not timed (its CUDA context has one
    /// hardware queue, [`crate::runner::UNTIMED_QUEUES`]): it is never timed either.
    pub untimed: bool,
    env: RunnerEnv,
    settings: EvalSettings,
}

/// A seed's expected outputs, as the reference made them.
struct Expectation {
    at: OutputRef,
    /// Their bytes, from the (trusted) reference.
    nbytes: u64,
}

/// Where candidates' output files are moved before they are compared.
const INTAKE: &str = "intake";

/// A reference runner whose interpreter is starting: spawned ahead of its turn so that Python's
/// start-up overlaps other work. It touches no device until [`StartingReference::ready`].
pub struct StartingReference {
    task: Task,
    dir: tempfile::TempDir,
    client: RunnerClient,
    env: RunnerEnv,
    /// Started for checks that are not timed ([`ReferenceSession::untimed`]).
    untimed: bool,
}

impl StartingReference {
    /// Waits for the interpreter and loads the reference on its device.
    pub fn ready(mut self, settings: &EvalSettings) -> Result<ReferenceSession, ReferenceError> {
        let (hello, load) = hello_and_load(&mut self.client, &self.task, settings)?;
        Ok(ReferenceSession {
            task: self.task,
            device: settings.device.clone(),
            client: self.client,
            hello,
            load,
            dir: self.dir,
            expected: HashMap::new(),
            taken: 0,
            first_call_ms: None,
            device_peak: None,
            reloaded: false,
            untimed: self.untimed,
            env: self.env,
            settings: settings.clone(),
        })
    }

    /// Whether, once ready, it may time the reference for a timed job: it was started for one.
    pub fn may_time(&self) -> bool {
        !self.untimed
    }

    /// See [`RunnerClient::set_nice`].
    pub fn set_nice(&self, nice: i32) -> bool {
        self.client.set_nice(nice)
    }

    /// Ends a reference that will not be used.
    pub fn discard(self) {
        self.client.shutdown();
    }
}

fn launch_reference(
    env: &RunnerEnv,
    task: &Task,
    settings: &EvalSettings,
    dir: &Path,
) -> Result<RunnerClient, ReferenceError> {
    let launch = Launch {
        role: Role::Reference,
        label: format!("reference {}", task.key()),
        device: &settings.device,
        scratch: dir,
        extensions: None,
        reads: vec![],
        sandbox: false,
        memory_bytes: None,
        untimed: !settings.mode.times(),
    };
    RunnerClient::spawn(env, launch).map_err(|source| ReferenceError {
        task: task.key(),
        doing: "starting",
        source,
        stderr: String::new(),
    })
}

fn hello_and_load(
    client: &mut RunnerClient,
    task: &Task,
    settings: &EvalSettings,
) -> Result<(HelloReply, LoadReply), ReferenceError> {
    let hello = client
        .call(&Hello {}, crate::runner::HELLO_TIMEOUT)
        .map_err(|e| failed(task, "starting", e, client))?;
    let load = load_task(client, task, settings, &hello)?;
    Ok((hello, load))
}

fn failed(
    task: &Task,
    doing: &'static str,
    source: CallError,
    client: &RunnerClient,
) -> ReferenceError {
    ReferenceError { task: task.key(), doing, source, stderr: tail(&client.stderr_tail()) }
}

/// Checks that `task` fits and loads it in a reference runner that has said hello.
fn load_task(
    client: &mut RunnerClient,
    task: &Task,
    settings: &EvalSettings,
    hello: &HelloReply,
) -> Result<LoadReply, ReferenceError> {
    crate::memory::refuse_if_too_large(client, &absolute(&task.path), settings, hello)
        .map_err(|e| failed(task, FITTING, e, client))?;
    let load = Load {
        reference: absolute(&task.path),
        candidate: None,
        device: runner_device(&settings.device),
        init_seed: INIT_SEED,
        scale: settings.scale,
    };
    client.call(&load, settings.load_timeout).map_err(|e| failed(task, "loading", e, client))
}

impl ReferenceSession {
    /// Starts the task's reference and loads it: [`ReferenceSession::spawn`], then
    /// [`StartingReference::ready`].
    pub fn start(
        env: &RunnerEnv,
        task: &Task,
        settings: &EvalSettings,
        work_root: &Path,
    ) -> Result<ReferenceSession, ReferenceError> {
        Self::spawn(env, task, settings, work_root)?.ready(settings)
    }

    /// Starts the task's reference runner without waiting for it.
    pub fn spawn(
        env: &RunnerEnv,
        task: &Task,
        settings: &EvalSettings,
        work_root: &Path,
    ) -> Result<StartingReference, ReferenceError> {
        let made = |e: std::io::Error| ReferenceError {
            task: task.key(),
            doing: "creating its work directory",
            source: CallError::Protocol(e.to_string()),
            stderr: String::new(),
        };
        let dir =
            tempfile::Builder::new().prefix("reference-").tempdir_in(work_root).map_err(made)?;
        std::fs::create_dir(dir.path().join(INTAKE)).map_err(made)?;
        let client = launch_reference(env, task, settings, dir.path())?;
        Ok(StartingReference {
            task: task.clone(),
            dir,
            client,
            env: env.clone(),
            untimed: !settings.mode.times(),
        })
    }

    /// A fresh runner in place of this one (after a candidate made it fail): the expected
    /// outputs made so far go, since the new process has not vouched for them.
    pub fn restart(&mut self) -> Result<(), ReferenceError> {
        let mut client = launch_reference(&self.env, &self.task, &self.settings, self.dir.path())?;
        let (hello, load) = hello_and_load(&mut client, &self.task, &self.settings)?;
        let old = std::mem::replace(&mut self.client, client);
        old.shutdown();
        self.untimed = !self.settings.mode.times();
        self.hello = hello;
        self.load = load;
        self.clear_expected();
        Ok(())
    }

    /// Loads another task in this reference's process, saving an interpreter's and a CUDA
    /// context's start. For correctness checks only: a task's module can change its process's
    /// global state (cuDNN's autotuner, say), which a timed reference must not carry over; the
    /// runner resets what PyTorch's defaults are known to be. The old task's expected outputs go.
    /// A failure ends the process.
    pub fn reload(
        mut self,
        task: &Task,
        settings: &EvalSettings,
    ) -> Result<ReferenceSession, ReferenceError> {
        self.clear_expected();
        self.client.relabel(format!("reference {}", task.key()));
        match load_task(&mut self.client, task, settings, &self.hello) {
            Ok(load) => {
                self.task = task.clone();
                self.device = settings.device.clone();
                self.settings = settings.clone();
                self.load = load;
                self.first_call_ms = None;
                self.device_peak = None;
                self.reloaded = true;
                Ok(self)
            }
            Err(e) => {
                self.shutdown();
                Err(e)
            }
        }
    }

    /// Whether it may time the reference for a timed job: its process was started for one, and
    /// never held another task.
    pub fn may_time(&self) -> bool {
        !self.reloaded && !self.untimed
    }

    /// Moves a candidate's output file (below its `scratch` directory) out of its reach,
    /// refusing anything but a plain file of its own ([`crate::intake`]).
    pub fn take_output(
        &mut self,
        scratch: &Path,
        path: &Path,
    ) -> Result<PathBuf, crate::intake::Refused> {
        self.taken += 1;
        crate::intake::take(
            scratch,
            path,
            &self.dir.path().join(INTAKE),
            &format!("candidate-{}.pt", self.taken),
        )
    }

    pub fn environment(&self) -> Environment {
        let gpu: Option<&DeviceInfo> =
            if self.device.is_cuda() { self.hello.devices.first() } else { None };
        Environment {
            python: self.hello.python.clone(),
            torch: self.hello.torch.clone(),
            cuda: self.hello.cuda.clone(),
            gpu: gpu.map(|d| d.name.clone()),
            driver: self.hello.driver.clone(),
        }
    }

    /// Makes expected outputs for the seeds that have none yet.
    pub fn ensure_expected(
        &mut self,
        seeds: &[u64],
        timeout: Duration,
    ) -> Result<(), ReferenceError> {
        let missing: Vec<u64> =
            seeds.iter().copied().filter(|s| !self.expected.contains_key(s)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let share_bytes = self.settings.share_bytes();
        let reply = self
            .client
            .call(
                &Expected { seeds: missing, dir: self.dir.path().to_owned(), share_bytes },
                timeout,
            )
            .map_err(|e| self.error("computing expected outputs", e))?;
        if let Some(peak) = reply.device_peak_bytes {
            self.device_peak = Some(self.device_peak.unwrap_or(0).max(peak));
        }
        for r in reply.results {
            if self.first_call_ms.is_none() {
                self.first_call_ms = Some(r.ms);
            }
            let (Some(at), Some(nbytes)) = (r.output(), r.nbytes) else {
                let detail = format!(
                    "its expected outputs of seed {} name no place (a file, or kept) or no size",
                    r.seed
                );
                return Err(self.error("computing expected outputs", CallError::Protocol(detail)));
            };
            self.expected.insert(r.seed, Expectation { at, nbytes });
        }
        Ok(())
    }

    /// The bytes of the expected outputs of `seed` (made by [`Self::ensure_expected`]).
    pub fn expected_bytes(&self, seed: u64) -> Option<u64> {
        self.expected.get(&seed).map(|e| e.nbytes)
    }

    /// Compares a candidate's outputs for `seed` (a file in custody, or exported on the device)
    /// with the expected ones.
    pub fn compare(
        &mut self,
        seed: u64,
        actual: &OutputRef,
        settings: &EvalSettings,
    ) -> Result<SeedOutcome, ReferenceError> {
        let expected = self
            .expected
            .get(&seed)
            .map(|e| e.at.clone())
            .expect("ensure_expected runs before compare");
        let timeout = Duration::from_secs(120);
        let (atol, rtol) = settings.tolerance.for_dtype("float32");
        let first = self
            .client
            .call(
                &Compare { expected: expected.clone(), actual: actual.clone(), atol, rtol },
                timeout,
            )
            .map_err(|e| self.error("comparing outputs", e))?;
        let mut replies = vec![((atol, rtol), first)];
        for (atol, rtol) in distinct_tolerances(&replies[0].1, &settings.tolerance) {
            if replies.iter().all(|(t, _)| *t != (atol, rtol)) {
                let r = self
                    .client
                    .call(
                        &Compare { expected: expected.clone(), actual: actual.clone(), atol, rtol },
                        timeout,
                    )
                    .map_err(|e| self.error("comparing outputs", e))?;
                replies.push(((atol, rtol), r));
            }
        }
        let fingerprint = replies[0].1.fingerprint.clone();
        Ok(SeedOutcome { fingerprint, ..judge(&replies, &settings.tolerance) })
    }

    /// Deletes every expected output. Seeds are fresh for each candidate, so nothing is reused,
    /// and large outputs (hundreds of MB each) would otherwise fill the disk over a batch.
    pub fn clear_expected(&mut self) {
        // On a GPU the reference also gives back what its allocator reserved for the checks'
        // outputs, so that it waits for the next candidate holding only its task.
        let mut kept = self.device.is_cuda() && !self.expected.is_empty();
        for (_, e) in self.expected.drain() {
            match e.at {
                OutputRef::File(path) => {
                    let _ = std::fs::remove_file(path);
                }
                _ => kept = true,
            }
        }
        if kept {
            match self.client.call(&Release {}, Duration::from_secs(60)) {
                Ok(_) => {}
                // A reference that has exited holds nothing: it was stopped (an interrupt, a
                // deadline) and is started again when it is needed.
                Err(
                    e @ CallError::Worker(cudal1_supervisor::WorkerError::Exited {
                        limit: None,
                        ..
                    }),
                ) => {
                    tracing::debug!(task = %self.task.key(), error = %e, "the reference exited before it released its kept expected outputs");
                }
                // The next expected outputs are made with the budget this one still holds.
                Err(e) => {
                    tracing::warn!(task = %self.task.key(), error = %e, "the reference did not release its kept expected outputs");
                }
            }
        }
        if let Ok(entries) = std::fs::read_dir(self.dir.path().join(INTAKE)) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    pub fn error(&self, doing: &'static str, source: CallError) -> ReferenceError {
        ReferenceError {
            task: self.task.key(),
            doing,
            source,
            stderr: tail(&self.client.stderr_tail()),
        }
    }

    pub fn shutdown(self) {
        self.client.shutdown();
    }
}

/// What a task takes and holds (`tasks list`), from a trusted CPU runner that allocates nothing
/// where the task allows it: [`Describer`] for one task.
pub fn describe(
    env: &RunnerEnv,
    task: &Task,
    settings: &EvalSettings,
    work_root: &Path,
) -> Result<DescribeReply, ReferenceError> {
    let mut describer = Describer::start(env, work_root).map_err(|(doing, source)| {
        ReferenceError { task: task.key(), doing, source, stderr: String::new() }
    })?;
    let result = describer.describe(task, settings);
    describer.shutdown();
    result
}

/// A trusted CPU runner that describes tasks one after another: one interpreter's start-up for
/// a whole suite rather than one per task (100 of KernelBench's tasks took 5 minutes on a
/// 2-core machine with a runner each). Tasks are references, trusted code; each is imported
/// under a fresh module name and dropped after.
pub struct Describer {
    client: RunnerClient,
    _dir: tempfile::TempDir,
}

impl Describer {
    /// Starts the runner; what failed (`creating its work directory`, `starting`) and why.
    pub fn start(
        env: &RunnerEnv,
        work_root: &Path,
    ) -> Result<Describer, (&'static str, CallError)> {
        let dir = tempfile::Builder::new()
            .prefix("describe-")
            .tempdir_in(work_root)
            .map_err(|e| ("creating its work directory", CallError::Protocol(e.to_string())))?;
        let launch = Launch {
            role: Role::Reference,
            label: "describe".into(),
            device: &Device::Cpu,
            scratch: dir.path(),
            extensions: None,
            reads: vec![],
            sandbox: false,
            memory_bytes: None,
            untimed: true,
        };
        let mut client = RunnerClient::spawn(env, launch).map_err(|e| ("starting", e))?;
        if let Err(e) = client.call(&Hello {}, crate::runner::HELLO_TIMEOUT) {
            client.shutdown();
            return Err(("starting", e));
        }
        Ok(Describer { client, _dir: dir })
    }

    /// Describes one task. After an error the runner may be gone ([`Describer::alive`]).
    pub fn describe(
        &mut self,
        task: &Task,
        settings: &EvalSettings,
    ) -> Result<DescribeReply, ReferenceError> {
        self.client
            .call(
                &Describe {
                    reference: absolute(&task.path),
                    scale: settings.scale,
                    meta_only: false,
                },
                settings.load_timeout,
            )
            .map_err(|source| ReferenceError {
                task: task.key(),
                doing: "loading",
                source,
                stderr: tail(&self.client.stderr_tail()),
            })
    }

    /// Sizes one task on meta tensors, allocating nothing (`None` where it cannot be sized so).
    /// After an error the runner may be gone ([`Describer::alive`]).
    pub fn size(
        &mut self,
        task: &Task,
        settings: &EvalSettings,
    ) -> Result<Option<crate::memory::Footprint>, ReferenceError> {
        let request =
            Describe { reference: absolute(&task.path), scale: settings.scale, meta_only: true };
        self.client
            .call(&request, settings.load_timeout.min(Duration::from_secs(120)))
            .map(|reply| crate::memory::Footprint::from_reply(&reply))
            .map_err(|source| ReferenceError {
                task: task.key(),
                doing: "sizing",
                source,
                stderr: tail(&self.client.stderr_tail()),
            })
    }

    /// Whether the runner can describe another task (it has not died or been killed).
    pub fn alive<T>(&self, last: &Result<T, ReferenceError>) -> bool {
        !matches!(
            last,
            Err(ReferenceError { source: CallError::Worker(_) | CallError::Protocol(_), .. })
        )
    }

    pub fn shutdown(self) {
        self.client.shutdown();
    }
}

/// Inside a runner the chosen GPU is the only visible one.
pub fn runner_device(device: &Device) -> String {
    match device {
        Device::Cpu => "cpu".into(),
        Device::Cuda(_) => "cuda:0".into(),
    }
}

pub fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}

/// The last lines of a log, enough to explain a failure.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let start = lines.len().saturating_sub(25);
    lines[start..].join("\n")
}
