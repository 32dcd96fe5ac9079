//! The profiling driver on the CPU, where no counter can be read: the program is loaded and called
//! as a profile would call it, failures come back with their kind, a hang is cut off, and asking
//! for a profile of the CPU says that a GPU is needed. Reading ncu's output is tested in the
//! module; the whole profile runs on a GPU (`bench/gpu_profile.sh`).

use super::{repo, runner_env};
use cudal1_eval::profile::{ProfileError, Profiler, Target};
use cudal1_eval::Device;
use std::path::PathBuf;
use std::time::Duration;

fn swish(candidate: Option<&str>) -> (PathBuf, Option<PathBuf>) {
    let suite = repo().join("tests/suite-cpu");
    (
        suite.join("tasks/level1/2_Swish.py"),
        candidate.map(|c| suite.join("candidates/level1/2_Swish").join(c)),
    )
}

#[test]
fn the_driver_runs_programs_reports_failures_and_cuts_off_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let env = runner_env(&dir.path().join("cache"));
    let mut profiler = Profiler::new("/nonexistent/ncu".into());
    profiler.timeout = Duration::from_secs(60);
    let at = |c: Option<&str>, i: u32| {
        let (task, candidate) = swish(c);
        (task, candidate, dir.path().join(format!("run-{i}")))
    };

    for (i, c) in [None, Some("correct.py")].into_iter().enumerate() {
        let (task, candidate, scratch) = at(c, i as u32);
        let target = Target {
            task: &task,
            candidate: candidate.as_deref(),
            device: &Device::Cpu,
            seed: 3,
            extensions: None,
        };
        profiler.dry_run(&env, target, &scratch).unwrap_or_else(|e| panic!("{c:?}: {e}"));
        let err = profiler.profile(&env, target, &scratch).unwrap_err();
        assert!(matches!(err, ProfileError::NeedsGpu), "{err}");
    }

    let (task, candidate, scratch) = at(Some("raises_in_forward.py"), 2);
    let err = profiler
        .dry_run(
            &env,
            Target {
                task: &task,
                candidate: candidate.as_deref(),
                device: &Device::Cpu,
                seed: 3,
                extensions: None,
            },
            &scratch,
        )
        .unwrap_err();
    let ProfileError::Program { kind, message } = &err else { panic!("{err}") };
    assert_eq!(kind, "runtime_error", "{message}");
    assert!(message.contains("warm-up"), "{message}");

    let (task, candidate, scratch) = at(Some("missing_modelnew.py"), 3);
    let err = profiler
        .dry_run(
            &env,
            Target {
                task: &task,
                candidate: candidate.as_deref(),
                device: &Device::Cpu,
                seed: 3,
                extensions: None,
            },
            &scratch,
        )
        .unwrap_err();
    assert!(
        matches!(&err, ProfileError::Program { kind, .. } if kind == "missing_symbol"),
        "{err}"
    );

    profiler.timeout = Duration::from_secs(3);
    let (task, candidate, scratch) = at(Some("infinite_loop.py"), 4);
    let started = std::time::Instant::now();
    let err = profiler
        .dry_run(
            &env,
            Target {
                task: &task,
                candidate: candidate.as_deref(),
                device: &Device::Cpu,
                seed: 3,
                extensions: None,
            },
            &scratch,
        )
        .unwrap_err();
    assert!(matches!(err, ProfileError::Timeout(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20));
}
