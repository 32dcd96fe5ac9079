//! One table: each deliberately bad worker and the error it must produce.

use std::time::{Duration, Instant};

use cudal1_supervisor::{
    Outcome, Sandbox, Worker, WorkerError, DEFAULT_LINE_LIMIT, DEFAULT_STDERR_TAIL,
};
use serde_json::{json, Value};

use crate::common::{gone, options, spec, start, REPLY};

type Check = fn(Result<Value, WorkerError>, &mut Worker);

struct Case {
    fixture: &'static str,
    /// Requests answered normally before the one under test.
    setup: &'static [&'static str],
    request: &'static str,
    timeout: Duration,
    check: Check,
}

fn ok_echo(result: Result<Value, WorkerError>, worker: &mut Worker) {
    let reply = result.unwrap();
    assert_eq!(reply["id"], 1);
    assert_eq!(reply["echo"]["op"], "ping");
    assert!(worker.is_alive());
}

fn timed_out(result: Result<Value, WorkerError>, worker: &mut Worker) {
    match result {
        Err(WorkerError::Timeout { after, .. }) => assert_eq!(after, Duration::from_millis(300)),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(!worker.is_alive());
}

fn segfaulted(result: Result<Value, WorkerError>, _: &mut Worker) {
    match result {
        Err(WorkerError::Exited { outcome, stderr_tail, limit, .. }) => {
            assert_eq!(
                outcome,
                Outcome::Signaled { signal: libc::SIGSEGV, name: "SIGSEGV".into() }
            );
            assert!(stderr_tail.contains("about to read address 0"), "{stderr_tail}");
            assert_eq!(limit, None);
        }
        other => panic!("expected Exited(SIGSEGV), got {other:?}"),
    }
}

fn exited_3(result: Result<Value, WorkerError>, _: &mut Worker) {
    match result {
        Err(WorkerError::Exited { outcome, stderr_tail, .. }) => {
            assert_eq!(outcome, Outcome::Exited(3));
            assert!(stderr_tail.contains("dying on purpose"), "{stderr_tail}");
        }
        other => panic!("expected Exited(3), got {other:?}"),
    }
}

fn not_json(result: Result<Value, WorkerError>, worker: &mut Worker) {
    match result {
        Err(WorkerError::Protocol { detail, .. }) => {
            assert!(detail.contains("this is not json"), "{detail}")
        }
        other => panic!("expected Protocol, got {other:?}"),
    }
    assert!(!worker.is_alive());
}

fn wrong_id(result: Result<Value, WorkerError>, worker: &mut Worker) {
    match result {
        Err(WorkerError::Protocol { detail, .. }) => {
            assert!(detail.contains("1001 does not match request id 1"), "{detail}")
        }
        other => panic!("expected Protocol, got {other:?}"),
    }
    assert!(!worker.is_alive());
}

fn too_long(result: Result<Value, WorkerError>, worker: &mut Worker) {
    match result {
        Err(WorkerError::LineTooLong { limit, .. }) => assert_eq!(limit, DEFAULT_LINE_LIMIT),
        other => panic!("expected LineTooLong, got {other:?}"),
    }
    assert!(!worker.is_alive());
}

fn leaked_grandchild(result: Result<Value, WorkerError>, worker: &mut Worker) {
    let tail = worker.stderr_tail();
    let grandchild: u32 = tail
        .lines()
        .find_map(|l| l.strip_prefix("grandchild pid "))
        .unwrap_or_else(|| panic!("no grandchild pid in {tail}"))
        .parse()
        .unwrap();
    match result {
        Err(WorkerError::Exited { outcome: Outcome::Leaked { leader, survivors }, .. }) => {
            assert_eq!(*leader, Outcome::Exited(0));
            assert_eq!(survivors, vec![grandchild]);
        }
        other => panic!("expected Exited(Leaked), got {other:?}"),
    }
    // SIGKILL is sent by the time the error returns; the kernel may take a moment to
    // finish the process, so wait on that event (bounded), not a fixed sleep.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(grandchild) {
        assert!(Instant::now() < deadline, "grandchild {grandchild} survived");
        std::thread::yield_now();
    }
}

fn flooded(result: Result<Value, WorkerError>, worker: &mut Worker) {
    assert_eq!(result.unwrap()["ok"], true);
    // stdout and stderr are separate pipes: the reply can overtake the last stderr bytes,
    // so wait (bounded) for the marker to reach the tail.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut tail = worker.stderr_tail();
    while !tail.ends_with("END-OF-FLOOD\n") {
        assert!(Instant::now() < deadline, "{}", &tail[tail.len().saturating_sub(100)..]);
        std::thread::yield_now();
        tail = worker.stderr_tail();
    }
    let (note, body) = tail.split_once('\n').unwrap();
    assert!(note.starts_with("[… ") && note.contains("earlier bytes of stderr dropped"), "{note}");
    assert_eq!(body.len(), DEFAULT_STDERR_TAIL);
    assert!(worker.is_alive());
}

const CASES: &[Case] = &[
    Case {
        fixture: "echo.py",
        setup: &[],
        request: r#"{"op": "ping"}"#,
        timeout: REPLY,
        check: ok_echo,
    },
    Case {
        fixture: "hang.py",
        setup: &[],
        request: "{}",
        timeout: Duration::from_millis(300),
        check: timed_out,
    },
    Case {
        fixture: "ignore_term.py",
        setup: &["{}"],
        request: "{}",
        timeout: Duration::from_millis(300),
        check: timed_out,
    },
    Case { fixture: "segfault.py", setup: &[], request: "{}", timeout: REPLY, check: segfaulted },
    Case {
        fixture: "echo.py",
        setup: &[],
        request: r#"{"op": "exit", "code": 3, "message": "dying on purpose"}"#,
        timeout: REPLY,
        check: exited_3,
    },
    Case { fixture: "garbage.py", setup: &[], request: "{}", timeout: REPLY, check: not_json },
    Case { fixture: "wrong_id.py", setup: &[], request: "{}", timeout: REPLY, check: wrong_id },
    Case { fixture: "huge_line.py", setup: &[], request: "{}", timeout: REPLY, check: too_long },
    Case {
        fixture: "grandchild.py",
        setup: &[],
        request: "{}",
        timeout: REPLY,
        check: leaked_grandchild,
    },
    Case {
        fixture: "stderr_flood.py",
        setup: &[],
        request: r#"{"mib": 50}"#,
        timeout: REPLY,
        check: flooded,
    },
];

#[test]
fn each_misbehaving_worker_gives_its_expected_error() {
    // Exec'd, then forked from the fork server: the supervision is the same.
    for (case, forked) in CASES.iter().flat_map(|c| [(c, false), (c, true)]) {
        eprintln!("case {}: {} (forked: {forked})", case.fixture, case.request);
        let mut worker = start(spec(case.fixture, Sandbox::disabled()), forked).unwrap();
        let pid = worker.pid();
        for setup in case.setup {
            worker.request(serde_json::from_str(setup).unwrap(), REPLY).unwrap();
        }
        let started = Instant::now();
        let result = worker.request(serde_json::from_str(case.request).unwrap(), case.timeout);
        // Timeouts include the kill: SIGTERM, at most the grace, SIGKILL.
        assert!(
            started.elapsed() < case.timeout + options().kill_grace + Duration::from_secs(5),
            "{}",
            case.fixture
        );
        (case.check)(result, &mut worker);
        drop(worker);
        assert!(gone(pid), "{}: leader {pid} outlived its Worker", case.fixture);
    }
}

#[test]
fn a_request_must_be_an_object_and_leaves_the_worker_usable() {
    let mut worker =
        Worker::spawn_with_options(spec("echo.py", Sandbox::disabled()), options()).unwrap();
    assert!(matches!(worker.request(json!([1, 2]), REPLY), Err(WorkerError::BadRequest { .. })));
    // The caller's own "id" is replaced by ours; ids count up.
    let reply = worker.request(json!({"op": "ping", "id": "mine"}), REPLY).unwrap();
    assert_eq!(reply["id"], 1);
    assert_eq!(worker.request(json!({"op": "ping"}), REPLY).unwrap()["id"], 2);
}

#[test]
fn requests_after_death_report_the_same_exit() {
    let mut worker =
        Worker::spawn_with_options(spec("segfault.py", Sandbox::disabled()), options()).unwrap();
    let first = worker.request(json!({}), REPLY).unwrap_err();
    let second = worker.request(json!({}), REPLY).unwrap_err();
    match (first, second) {
        (WorkerError::Exited { outcome: a, .. }, WorkerError::Exited { outcome: b, .. }) => {
            assert_eq!(a, b)
        }
        other => panic!("{other:?}"),
    }
}
