//! What the supervisor decides for every child besides the protocol: jobs (the probe, profiled
//! runs) end at their time limit or when cancelled with their whole group, and a job that ends on
//! its own takes what it left behind with it; pause and resume stop and continue a worker's group;
//! the live-child registry kills what works below a directory, also what enlists there later.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cudal1_supervisor::{
    kill_class_under, kill_under, live_under, Job, JobError, JobOutput, JobSpec, Sandbox, Worker,
};
use serde_json::json;

use crate::common::{gone, options, python, spec, REPLY};

/// A Python job that starts a child of its own (which would hold its output open), writes both
/// pids to `pids`, then does `then`.
fn job(pids: &Path, then: &str, output: JobOutput) -> JobSpec {
    let script = format!(
        "import subprocess, sys\n\
         child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n\
         open({:?}, 'w').write(f'{{__import__(\"os\").getpid()}} {{child.pid}}')\n\
         print('started', flush=True)\n\
         {then}\n",
        pids.display().to_string()
    );
    JobSpec {
        label: "a test job".into(),
        program: python().to_path_buf(),
        args: vec!["-c".into(), script.into()],
        cwd: None,
        env: None,
        stdin: None,
        output,
    }
}

fn pids_of(file: &Path) -> Vec<u32> {
    std::fs::read_to_string(file).unwrap().split_whitespace().map(|p| p.parse().unwrap()).collect()
}

/// Waits a little for `pid` to go: a killed process is reaped by whoever adopted it.
fn goes(pid: u32) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while !gone(pid) {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
fn a_job_that_outlives_its_time_limit_is_killed_with_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let started = Instant::now();
    let err = Job::run(
        job(&pids, "import time; time.sleep(300)", JobOutput::Capture),
        Duration::from_secs(3),
        None,
    )
    .unwrap_err();
    assert!(matches!(err, JobError::Timeout { after, .. } if after == Duration::from_secs(3)));
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    for pid in pids_of(&pids) {
        assert!(goes(pid), "{pid} survived the job's timeout");
    }
}

#[test]
fn a_job_that_ends_takes_its_leftovers_with_it_and_gives_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let end = Job::run(
        job(&pids, "sys.stderr.write('bye'); sys.exit(3)", JobOutput::Capture),
        Duration::from_secs(60),
        None,
    )
    .unwrap();
    assert_eq!(end.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&end.stdout), "started\n");
    assert_eq!(String::from_utf8_lossy(&end.stderr), "bye");
    let [leader, child] = pids_of(&pids)[..] else { panic!("two pids") };
    assert!(gone(leader), "the leader is reaped");
    assert!(goes(child), "the child it left behind is killed");

    // Into a file, both streams; input from bytes.
    let log = dir.path().join("out.log");
    let mut cat = job(&pids, "sys.stdout.write(sys.stdin.read())", JobOutput::File(log.clone()));
    cat.stdin = Some(b"from stdin\n".to_vec());
    let end = Job::run(cat, Duration::from_secs(60), None).unwrap();
    assert!(end.status.success() && end.stdout.is_empty());
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "started\nfrom stdin\n");
}

#[test]
fn a_cancelled_job_is_killed_and_a_missing_program_is_a_spawn_error() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let stop = AtomicBool::new(false);
    let cancel = || {
        // Cancelled once the job is under way.
        if pids.exists() {
            stop.store(true, Ordering::SeqCst);
        }
        stop.load(Ordering::SeqCst)
    };
    let err = Job::run(
        job(&pids, "import time; time.sleep(300)", JobOutput::Capture),
        Duration::from_secs(120),
        Some(&cancel),
    )
    .unwrap_err();
    assert!(matches!(err, JobError::Cancelled { .. }), "{err}");
    for pid in pids_of(&pids) {
        assert!(goes(pid), "{pid} survived the cancel");
    }
    let mut missing = job(&pids, "", JobOutput::Capture);
    missing.program = dir.path().join("no-such-program");
    let err = Job::run(missing, Duration::from_secs(5), None).unwrap_err();
    assert!(matches!(err, JobError::Spawn { .. }), "{err}");
}

/// The state letter of `/proc/PID/stat`.
fn state(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat[stat.rfind(')').unwrap() + 1..].split_whitespace().next().unwrap().to_owned()
}

#[test]
fn a_paused_worker_stops_until_resumed() {
    let mut worker =
        Worker::spawn_with_options(spec("echo.py", Sandbox::disabled()), options()).unwrap();
    worker.request(json!({"op": "ping"}), REPLY).unwrap();
    worker.pause();
    let until = Instant::now() + Duration::from_secs(5);
    while state(worker.pid()) != "T" {
        assert!(Instant::now() < until, "not stopped: {}", state(worker.pid()));
        std::thread::sleep(Duration::from_millis(5));
    }
    worker.resume();
    let reply = worker.request(json!({"op": "ping"}), REPLY).unwrap();
    assert_eq!(reply["ok"], true);
    worker.terminate(Duration::from_secs(2));
}

#[test]
fn the_registry_kills_what_works_below_a_directory_and_what_enlists_there_later() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, other) = (dir.path().join("engine"), dir.path().join("other"));
    let start = |scope: &Path, class: &'static str| {
        let mut w =
            Worker::spawn_with_options(spec("echo.py", Sandbox::disabled()), options()).unwrap();
        w.request(json!({"op": "ping"}), REPLY).unwrap();
        w.enlist(&scope.join("lane-0"), class);
        w
    };
    let mut build = start(&engine, "compile");
    let mut runner = start(&engine, "candidate");
    let mut elsewhere = start(&other, "compile");
    assert_eq!(live_under(&engine), 2);
    // Builds only: the runner and the other directory's build go on.
    kill_class_under(&engine, "compile");
    assert!(build.request(json!({"op": "ping"}), REPLY).is_err());
    assert!(runner.request(json!({"op": "ping"}), REPLY).is_ok());
    kill_under(&engine);
    assert!(runner.request(json!({"op": "ping"}), REPLY).is_err());
    assert!(elsewhere.request(json!({"op": "ping"}), REPLY).is_ok());
    // A worker whose start was under way when its directory was killed dies as it enlists.
    let mut late = start(&dir.path().join("other-still"), "candidate");
    let mut late_engine =
        Worker::spawn_with_options(spec("echo.py", Sandbox::disabled()), options()).unwrap();
    late_engine.enlist(&engine.join("lane-1"), "candidate");
    assert!(late_engine.request(json!({"op": "ping"}), REPLY).is_err());
    assert!(late.request(json!({"op": "ping"}), REPLY).is_ok());
    // Ended workers leave the registry.
    drop((build, runner, late_engine));
    assert_eq!(live_under(&engine), 0);
    assert_eq!(live_under(&other), 1);
    elsewhere.terminate(Duration::from_secs(2));
    assert_eq!(live_under(&other), 0);
}
