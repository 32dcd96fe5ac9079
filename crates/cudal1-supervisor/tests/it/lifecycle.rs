//! Spawning, terminating and dropping: the outcomes of ending a worker.

use std::time::{Duration, Instant};

use cudal1_supervisor::{Outcome, Sandbox, SpawnError, Worker};
use serde_json::json;

use crate::common::{gone, options, python, spec, REPLY};

#[test]
fn terminate_outcomes() {
    struct Case {
        fixture: &'static str,
        setup: Option<serde_json::Value>,
        grace: Duration,
        expect: Outcome,
        at_least: Duration,
    }
    let cases = [
        // Python's default SIGTERM disposition kills it.
        Case {
            fixture: "echo.py",
            setup: Some(json!({"op": "ping"})),
            grace: Duration::from_secs(5),
            expect: Outcome::Signaled { signal: libc::SIGTERM, name: "SIGTERM".into() },
            at_least: Duration::ZERO,
        },
        // Ignores SIGTERM: SIGKILL after the whole grace period.
        Case {
            fixture: "ignore_term.py",
            setup: Some(json!({})),
            grace: Duration::from_millis(300),
            expect: Outcome::Signaled { signal: libc::SIGKILL, name: "SIGKILL".into() },
            at_least: Duration::from_millis(300),
        },
    ];
    for case in cases {
        let mut worker =
            Worker::spawn_with_options(spec(case.fixture, Sandbox::disabled()), options()).unwrap();
        if let Some(setup) = case.setup {
            worker.request(setup, REPLY).unwrap();
        }
        let pid = worker.pid();
        let started = Instant::now();
        let outcome = worker.terminate(case.grace);
        let took = started.elapsed();
        assert_eq!(outcome, case.expect, "{}", case.fixture);
        assert!(
            took >= case.at_least && took < case.grace + Duration::from_secs(5),
            "{}: {took:?}",
            case.fixture
        );
        assert!(gone(pid));
    }
}

#[test]
fn a_clean_shutdown_is_exited_zero() {
    let mut worker =
        Worker::spawn_with_options(spec("echo.py", Sandbox::disabled()), options()).unwrap();
    assert_eq!(worker.request(json!({"op": "shutdown"}), REPLY).unwrap()["ok"], true);
    assert_eq!(worker.wait(REPLY), Some(Outcome::Exited(0)));
    assert!(!worker.is_alive());
    assert_eq!(worker.terminate(Duration::from_secs(1)), Outcome::Exited(0));
}

#[test]
fn wait_returns_none_while_running() {
    let mut worker =
        Worker::spawn_with_options(spec("echo.py", Sandbox::disabled()), options()).unwrap();
    assert_eq!(worker.wait(Duration::from_millis(50)), None);
    assert!(worker.is_alive());
}

#[test]
fn a_timed_out_worker_terminates_as_timed_out() {
    let mut worker =
        Worker::spawn_with_options(spec("hang.py", Sandbox::disabled()), options()).unwrap();
    assert!(worker.request(json!({}), Duration::from_millis(200)).is_err());
    assert_eq!(worker.terminate(Duration::from_secs(1)), Outcome::TimedOut);
}

#[test]
fn terminate_after_a_leak_reports_it() {
    let mut worker =
        Worker::spawn_with_options(spec("grandchild.py", Sandbox::disabled()), options()).unwrap();
    let _ = worker.request(json!({}), REPLY);
    match worker.terminate(Duration::from_secs(1)) {
        Outcome::Leaked { leader, survivors } => {
            assert_eq!(*leader, Outcome::Exited(0));
            assert_eq!(survivors.len(), 1);
        }
        other => panic!("expected Leaked, got {other:?}"),
    }
}

#[test]
fn dropping_a_worker_kills_its_group() {
    let mut worker =
        Worker::spawn_with_options(spec("ignore_term.py", Sandbox::disabled()), options()).unwrap();
    worker.request(json!({}), REPLY).unwrap();
    let pid = worker.pid();
    assert!(!gone(pid));
    drop(worker);
    assert!(gone(pid));
}

#[test]
fn a_missing_program_is_a_spawn_error() {
    let mut s = spec("echo.py", Sandbox::disabled());
    s.program = "/nonexistent/python".into();
    match Worker::spawn(s) {
        Err(SpawnError::Spawn { program, source, .. }) => {
            assert_eq!(program, std::path::PathBuf::from("/nonexistent/python"));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        Err(other) => panic!("expected Spawn, got {other:?}"),
        Ok(_) => panic!("a missing program started"),
    }
    let mut s = spec("echo.py", Sandbox::disabled());
    s.program = "python3".into();
    assert!(matches!(Worker::spawn(s), Err(SpawnError::InvalidSpec { .. })));
}

#[test]
fn the_worker_leads_its_own_session_and_group() {
    let mut worker =
        Worker::spawn_with_options(spec("echo.py", Sandbox::disabled()), options()).unwrap();
    worker.request(json!({"op": "ping"}), REPLY).unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", worker.pid())).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    // state ppid pgrp session
    assert_eq!(fields[2], worker.pid().to_string(), "pgrp");
    assert_eq!(fields[3], worker.pid().to_string(), "session");
    assert!(python().is_absolute());
}
