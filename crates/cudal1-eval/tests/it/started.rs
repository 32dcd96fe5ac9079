//! A candidate's runner that dies before the candidate is loaded (a process started ahead and
//! killed from outside, an interpreter that cannot start) has run none of the candidate's code:
//! it is replaced once, and a second failure is no verdict rather than the candidate's crash. And
//! what else a runner inherits from cudal1 so that honest programs are not judged for it, and
//! the phases an evaluation records however it ends.

use super::{candidate, runner_env, task};
use cudal1_eval::candidate::{evaluate_in, CandidateProcess, EvalContext, Unjudged};
use cudal1_eval::{CompileOutcome, EvalSettings, Evaluation, ReferenceSession, RunnerEnv, Verdict};
use rand::SeedableRng;
use std::path::Path;
use std::time::Duration;

/// Swish's reference, started with the runner environment, for evaluations to call directly;
/// its scratch under `dir/references`.
struct Swish {
    env: RunnerEnv,
    settings: EvalSettings,
    task: std::sync::Arc<cudal1_task::Task>,
    reference: ReferenceSession,
}

impl Swish {
    fn start(dir: &Path) -> Swish {
        let env = runner_env(&dir.join("cache"));
        let settings =
            EvalSettings { timing_budget: Duration::from_millis(300), ..EvalSettings::default() };
        let task = task("level1/2_Swish.py");
        let references = dir.join("references");
        std::fs::create_dir_all(&references).unwrap();
        let reference = ReferenceSession::start(&env, &task, &settings, &references).unwrap();
        Swish { env, settings, task, reference }
    }

    /// Evaluates a candidate of `candidates/level1/2_Swish/` under `env` (the candidate's side),
    /// in the process started ahead if one is given.
    fn evaluate(
        &mut self,
        env: &RunnerEnv,
        work_root: &Path,
        file: &str,
        ahead: Option<CandidateProcess>,
    ) -> Result<Evaluation, Unjudged> {
        let ctx = EvalContext {
            env,
            settings: &self.settings,
            work_root,
            retired: None,
            before_timing: None,
            shares_device: false,
        };
        let program = candidate(&format!("level1/2_Swish/{file}"));
        evaluate_in(
            &ctx,
            &mut self.reference,
            &program,
            &CompileOutcome::NotNeeded,
            ahead,
            rand::rngs::StdRng::seed_from_u64(1),
        )
    }
}

#[test]
fn a_runner_killed_before_the_candidate_loads_is_replaced_and_the_candidate_judged() {
    let dir = tempfile::tempdir().unwrap();
    let mut swish = Swish::start(dir.path());
    let candidates = dir.path().join("candidates");
    std::fs::create_dir_all(&candidates).unwrap();
    let ctx = EvalContext {
        env: &swish.env,
        settings: &swish.settings,
        work_root: &candidates,
        retired: None,
        before_timing: None,
        shares_device: false,
    };
    let ahead = CandidateProcess::start(
        &ctx,
        &swish.task.path,
        &candidate("level1/2_Swish/correct.py"),
        &CompileOutcome::NotNeeded,
    )
    .unwrap();
    // Killed from outside as the OOM killer or an operator would.
    let group = nix::unistd::Pid::from_raw(ahead.pid() as i32);
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
    let env = swish.env.clone();
    let e = swish.evaluate(&env, &candidates, "correct.py", Some(ahead)).unwrap();
    assert_eq!(e.verdict, Verdict::Correct, "{}: {}", e.reason_class, e.reason);
    swish.reference.shutdown();
}

#[test]
fn a_runner_that_never_starts_gives_no_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let mut swish = Swish::start(dir.path());
    // An interpreter that exits at once, for the candidate's side only.
    let broken = RunnerEnv { python: "/bin/false".into(), ..swish.env.clone() };
    match swish.evaluate(&broken, dir.path(), "correct.py", None) {
        Err(Unjudged::Host(reason)) => {
            assert!(reason.contains("failed twice before the candidate was loaded"), "{reason}")
        }
        Ok(e) => panic!("a verdict for a candidate that never ran: {:?} {}", e.verdict, e.reason),
        Err(e) => panic!("{e}"),
    }
    // A process that cannot even be started (here its scratch directory; in CI once, its cgroup,
    // whose name a gone process had left behind) is no verdict either, not `runtime_error`.
    let env = swish.env.clone();
    match swish.evaluate(&env, &dir.path().join("missing"), "correct.py", None) {
        Err(Unjudged::Host(reason)) => {
            assert!(reason.contains("could not make a scratch directory"), "{reason}")
        }
        Ok(e) => panic!("a verdict for a candidate that never ran: {:?} {}", e.verdict, e.reason),
        Err(e) => panic!("{e}"),
    }
    swish.reference.shutdown();
}

#[test]
fn inductor_compiles_inside_the_runner_without_a_pool_of_worker_processes() {
    // A pool's workers would work while the other side is timed (the idle guard's exploit).
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = printed_in_runner_environment(
        dir.path(),
        &cudal1_eval::Device::Cpu,
        false,
        "import torch._inductor.config as c; print(c.compile_threads)",
    );
    assert_eq!(out, "1", "{err}");
}

#[test]
fn only_processes_that_are_never_timed_get_one_hardware_queue() {
    // One queue makes CUDA contexts far quicker to make and end; a timed process keeps the
    // driver's default, as users run their programs.
    let dir = tempfile::tempdir().unwrap();
    let queues = |device: cudal1_eval::Device, untimed: bool| {
        printed_in_runner_environment(
            dir.path(),
            &device,
            untimed,
            "import os; print(os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS'))",
        )
        .0
    };
    assert_eq!(queues(cudal1_eval::Device::Cuda(0), true), cudal1_eval::runner::UNTIMED_QUEUES);
    assert_eq!(queues(cudal1_eval::Device::Cuda(0), false), "None");
    assert_eq!(queues(cudal1_eval::Device::Cpu, true), "None");
}

/// What `code` prints (stdout, stderr) in an interpreter with a runner's environment for `device`.
fn printed_in_runner_environment(
    dir: &Path,
    device: &cudal1_eval::Device,
    untimed: bool,
    code: &str,
) -> (String, String) {
    let env = runner_env(&dir.join("cache"));
    let vars = cudal1_eval::runner::environment(&env, dir, device, true, None, false, untimed);
    let out = std::process::Command::new(&env.python)
        .env_clear()
        .envs(vars)
        .args(["-c", code])
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_runner_imports_torch_without_starting_a_thread_pool() {
    // numpy's OpenBLAS would start one spinning thread per core at import: CPU that every
    // interpreter of a correctness run pays, and work beside the other side's timing.
    let dir = tempfile::tempdir().unwrap();
    for device in [cudal1_eval::Device::Cpu, cudal1_eval::Device::Cuda(0)] {
        let (out, err) = printed_in_runner_environment(
            dir.path(),
            &device,
            false,
            "import os, torch, numpy; print(len(os.listdir('/proc/self/task')))",
        );
        assert_eq!(out, "1", "{device:?}: {err}");
    }
}

#[test]
fn a_failed_check_is_timed_as_its_phase() {
    let dir = tempfile::tempdir().unwrap();
    let mut swish = Swish::start(dir.path());
    let env = swish.env.clone();
    let e = swish.evaluate(&env, dir.path(), "nan_output.py", None).unwrap();
    assert_eq!(e.verdict, Verdict::Incorrect, "{}", e.reason);
    let phases = &e.measurements.phases_ms;
    for name in ["start", "load", "correctness"] {
        assert!(phases.get(name).is_some_and(|ms| *ms > 0.0), "no {name} phase in {phases:?}");
    }
    assert!(!phases.contains_key("timing"), "{phases:?}");
    swish.reference.shutdown();
}

/// Every `.pyc` file below `dir`, as paths relative to it.
fn bytecode_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "pyc") {
                found.push(path.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    found
}

#[test]
fn references_fill_the_bytecode_cache_and_candidates_only_read_it() {
    // Where an installation has no bytecode, every runner would compile torch from source
    // (seconds of CPU each). References keep it in one cache; a candidate's process must not
    // write there, since what it wrote would run in the trusted reference.
    let dir = tempfile::tempdir().unwrap();
    let mut swish = Swish::start(dir.path());
    let cache = swish.env.bytecode.clone().expect("RunnerEnv::prepare names a bytecode cache");
    let env = swish.env.clone();
    let e = swish.evaluate(&env, dir.path(), "correct.py", None).unwrap();
    assert_eq!(e.verdict, Verdict::Correct, "{}", e.reason);

    let hostile = dir.path().join("poisoner.py");
    std::fs::write(
        &hostile,
        "import os, sys\n\
         import torch\n\
         prefix = sys.pycache_prefix or os.environ.get('PYTHONPYCACHEPREFIX', '')\n\
         try:\n    open(os.path.join(prefix, 'poison.pyc'), 'wb').write(b'x')\n\
         except OSError:\n    pass\n\
         class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.nn.functional.silu(x)\n",
    )
    .unwrap();
    let ctx = EvalContext {
        env: &env,
        settings: &swish.settings,
        work_root: dir.path(),
        retired: None,
        before_timing: None,
        shares_device: false,
    };
    let program = cudal1_task::Candidate::load(&hostile).unwrap();
    let e = evaluate_in(
        &ctx,
        &mut swish.reference,
        &program,
        &CompileOutcome::NotNeeded,
        None,
        rand::rngs::StdRng::seed_from_u64(2),
    )
    .unwrap();
    swish.reference.shutdown();

    let files = bytecode_files(&cache);
    let has = |part: &str| files.iter().any(|f| f.contains(part));
    // The reference's own imports are cached...
    assert!(
        has("torch"),
        "{} files, none of torch: {:?}",
        files.len(),
        files.iter().take(5).collect::<Vec<_>>()
    );
    // ... but no program's own code (it is never read again), and nothing a candidate wrote: an
    // honest one does not write, a hostile one cannot.
    assert!(!has("2_Swish") && !has("correct") && !has("poisoner"), "{files:?}");
    // The attempt itself is seen (a file outside its own directory)...
    assert_eq!(e.verdict, Verdict::Exploit, "{}", e.reason);
    // ... and the sandbox refused the write.
    if cudal1_supervisor::sandbox_support().landlock.is_some() {
        assert!(
            !cache.join("poison.pyc").exists(),
            "a sandboxed candidate wrote into the bytecode cache"
        );
    }
}

/// Swish's candidate that is right only when its process runs at nice value 0.
pub fn nice_sensitive() -> cudal1_task::Candidate {
    let source = "import os\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        # Wrong while the process runs niced.\n        return F.silu(x) + os.getpriority(os.PRIO_PROCESS, 0)\n";
    cudal1_task::Candidate::from_source("nice_sensitive.py".into(), source.into())
}

#[test]
fn a_process_started_ahead_for_a_check_runs_niced_until_its_turn() {
    let dir = tempfile::tempdir().unwrap();
    let mut swish = Swish::start(dir.path());
    let candidates = dir.path().join("candidates");
    std::fs::create_dir_all(&candidates).unwrap();
    let ctx = EvalContext {
        env: &swish.env,
        settings: &swish.settings,
        work_root: &candidates,
        retired: None,
        before_timing: None,
        shares_device: false,
    };
    let program = nice_sensitive();
    let rng = || rand::rngs::StdRng::seed_from_u64(1);
    // Niced ahead and left so: every thread of the candidate runs niced.
    let ahead =
        CandidateProcess::start(&ctx, &swish.task.path, &program, &CompileOutcome::NotNeeded)
            .unwrap();
    assert!(ahead.set_nice(cudal1_eval::runner::AHEAD_NICE));
    let e = evaluate_in(
        &ctx,
        &mut swish.reference,
        &program,
        &CompileOutcome::NotNeeded,
        Some(ahead),
        rng(),
    )
    .unwrap();
    assert_eq!(e.verdict, Verdict::Incorrect, "{}: {}", e.reason_class, e.reason);
    // Given its priority back at its turn, where the user may raise priorities (root).
    let ahead =
        CandidateProcess::start(&ctx, &swish.task.path, &program, &CompileOutcome::NotNeeded)
            .unwrap();
    ahead.set_nice(cudal1_eval::runner::AHEAD_NICE);
    let raised = ahead.set_nice(0);
    assert_eq!(raised, nix::unistd::geteuid().is_root(), "only root may raise a priority here");
    let e = evaluate_in(
        &ctx,
        &mut swish.reference,
        &program,
        &CompileOutcome::NotNeeded,
        Some(ahead),
        rng(),
    )
    .unwrap();
    let want = if raised { Verdict::Correct } else { Verdict::Incorrect };
    assert_eq!(e.verdict, want, "{}: {}", e.reason_class, e.reason);
    swish.reference.shutdown();
}

fn parent_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("PPid:")).unwrap().trim().parse().unwrap()
}

#[test]
fn references_and_candidates_are_forked_from_fork_servers_of_their_own() {
    use cudal1_eval::runner::{Launch, Role, RunnerClient};
    let dir = tempfile::tempdir().unwrap();
    let mut env = runner_env(&dir.path().join("cache"));
    let device = cudal1_eval::Device::Cpu;
    let start = |env: &RunnerEnv, role: Role, name: &str| {
        let scratch = dir.path().join(name);
        std::fs::create_dir_all(&scratch).unwrap();
        let launch = Launch {
            role,
            label: name.to_owned(),
            device: &device,
            scratch: &scratch,
            extensions: None,
            reads: vec![],
            sandbox: role == Role::Candidate,
            memory_bytes: None,
            untimed: false,
        };
        RunnerClient::spawn(env, launch).unwrap()
    };
    let reference = start(&env, Role::Reference, "reference");
    let first = start(&env, Role::Candidate, "first");
    let second = start(&env, Role::Candidate, "second");
    let me = std::process::id();
    let (r, a, b) = (parent_of(reference.pid()), parent_of(first.pid()), parent_of(second.pid()));
    assert!(r != me && a != me, "runners are forked, not started by this process");
    // Forks of one process share where its libraries were mapped: a candidate must not share
    // the reference's.
    assert_ne!(r, a, "a candidate was forked from the references' fork server");
    assert_eq!(a, b, "each candidate started its own fork server");
    env.forks = false;
    let exec = start(&env, Role::Candidate, "exec");
    assert_eq!(
        parent_of(exec.pid()),
        me,
        "CUDAL1_FORK_SERVER=0's runners start their own interpreters"
    );
    for client in [reference, first, second, exec] {
        client.shutdown();
    }
}
