//! A candidate's runner that dies before the candidate is loaded (a process started ahead and
//! killed from outside, an interpreter that cannot start) has run none of the candidate's code:
//! it is replaced once, and a second failure is no verdict rather than the candidate's crash. And
//! what else a runner inherits from cudal1 so that honest programs are not judged for it, and
//! the phases an evaluation records however it ends.

use super::{candidate, runner_env, task};
use cudal1_eval::candidate::{evaluate_in, CandidateProcess, EvalContext, Unjudged};
use cudal1_eval::runner::kill_under;
use cudal1_eval::{CompileOutcome, EvalSettings, ReferenceSession, RunnerEnv, Verdict};
use rand::SeedableRng;
use std::time::Duration;

fn settings() -> EvalSettings {
    EvalSettings { timing_budget: Duration::from_millis(300), ..EvalSettings::default() }
}

#[test]
fn a_runner_killed_before_the_candidate_loads_is_replaced_and_the_candidate_judged() {
    let dir = tempfile::tempdir().unwrap();
    let env = runner_env(&dir.path().join("cache"));
    let settings = settings();
    let (references, candidates) = (dir.path().join("references"), dir.path().join("candidates"));
    std::fs::create_dir_all(&references).unwrap();
    std::fs::create_dir_all(&candidates).unwrap();
    let task = task("level1/2_Swish.py");
    let mut reference = ReferenceSession::start(&env, &task, &settings, &references).unwrap();
    let program = candidate("level1/2_Swish/correct.py");
    let ctx = EvalContext { env: &env, settings: &settings, work_root: &candidates, retired: None, before_timing: None };
    let ahead = CandidateProcess::start(&ctx, &task.path, &program, &CompileOutcome::NotNeeded).unwrap();
    // Killed from outside as the OOM killer or an operator would: only the candidate's runner
    // works below `candidates`.
    kill_under(&candidates);
    let e = evaluate_in(&ctx, &mut reference, &program, &CompileOutcome::NotNeeded, Some(ahead), rand::rngs::StdRng::seed_from_u64(1)).unwrap();
    assert_eq!(e.verdict, Verdict::Correct, "{}: {}", e.reason_class, e.reason);
    reference.shutdown();
}

#[test]
fn a_runner_that_never_starts_gives_no_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let env = runner_env(&dir.path().join("cache"));
    let settings = settings();
    let task = task("level1/2_Swish.py");
    let mut reference = ReferenceSession::start(&env, &task, &settings, dir.path()).unwrap();
    // An interpreter that exits at once, for the candidate's side only.
    let broken = RunnerEnv { python: "/bin/false".into(), ..env.clone() };
    let ctx = EvalContext { env: &broken, settings: &settings, work_root: dir.path(), retired: None, before_timing: None };
    let program = candidate("level1/2_Swish/correct.py");
    match evaluate_in(&ctx, &mut reference, &program, &CompileOutcome::NotNeeded, None, rand::rngs::StdRng::seed_from_u64(1)) {
        Err(Unjudged::Host(reason)) => assert!(reason.contains("failed twice before the candidate was loaded"), "{reason}"),
        Ok(e) => panic!("a verdict for a candidate that never ran: {:?} {}", e.verdict, e.reason),
        Err(e) => panic!("{e}"),
    }
    reference.shutdown();
}

#[test]
fn inductor_compiles_inside_the_runner_without_a_pool_of_worker_processes() {
    // A pool's workers would work while the other side is timed (the idle guard's exploit).
    let dir = tempfile::tempdir().unwrap();
    let env = runner_env(&dir.path().join("cache"));
    let vars = cudal1_eval::runner::environment(&env, dir.path(), &cudal1_eval::Device::Cpu, true, None);
    let out = std::process::Command::new(&env.python)
        .env_clear()
        .envs(vars)
        .args(["-c", "import torch._inductor.config as c; print(c.compile_threads)"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_failed_check_is_timed_as_its_phase() {
    let dir = tempfile::tempdir().unwrap();
    let env = runner_env(&dir.path().join("cache"));
    let settings = settings();
    let task = task("level1/2_Swish.py");
    let mut reference = ReferenceSession::start(&env, &task, &settings, dir.path()).unwrap();
    let ctx = EvalContext { env: &env, settings: &settings, work_root: dir.path(), retired: None, before_timing: None };
    let program = candidate("level1/2_Swish/nan_output.py");
    let e = evaluate_in(&ctx, &mut reference, &program, &CompileOutcome::NotNeeded, None, rand::rngs::StdRng::seed_from_u64(1)).unwrap();
    assert_eq!(e.verdict, Verdict::Incorrect, "{}", e.reason);
    let phases = &e.measurements.phases_ms;
    for name in ["start", "load", "correctness"] {
        assert!(phases.get(name).is_some_and(|ms| *ms > 0.0), "no {name} phase in {phases:?}");
    }
    assert!(!phases.contains_key("timing"), "{phases:?}");
    reference.shutdown();
}
