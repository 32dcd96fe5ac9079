//! What is particular to workers forked from a fork server: they die with it, and it forks only
//! its own program.

use std::time::Duration;

use cudal1_supervisor::{Sandbox, SpawnError, SpawnOptions, Worker, WorkerError, Zygote};
use serde_json::json;

use crate::common::{base_env, fixtures, gone, options, python, spec, REPLY};

/// A fork server of its own (the shared one must outlive every test).
fn private_zygote() -> Zygote {
    zygote_running(&["-m".into(), "cudal1_runner.zygote".into()])
}

fn zygote_running(args: &[std::ffi::OsString]) -> Zygote {
    let mut env = base_env();
    let paths = std::env::join_paths([crate::common::python_packages(), fixtures()]).unwrap();
    env.push(("PYTHONPATH".into(), paths));
    Zygote::start(python(), args, &std::env::temp_dir(), &env).unwrap()
}

/// A confined child forked by `liar` is refused, the fork server's error saying `why`; `what` the
/// child is, for the failure.
fn refuses_a_confined_child(liar: &Zygote, why: &str, what: &str) {
    match Worker::spawn_forked(spec("echo.py", Sandbox::strict()), options(), liar) {
        Err(SpawnError::Zygote { detail, .. }) => assert!(detail.contains(why), "{detail}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("{what} was taken for a confined one"),
    }
}

#[test]
fn a_child_that_says_it_is_confined_but_is_not_is_refused() {
    // Its children skip every step and still answer that all of them took: what the kernel
    // shows of the child (no seccomp filter, no no_new_privs, our network namespace) says not.
    let liar = zygote_running(&[fixtures().join("lying_zygote.py").into()]);
    refuses_a_confined_child(&liar, "not confined", "an unconfined child");
    // Unconfined workers (trusted ones) have no steps to check.
    let mut trusted =
        Worker::spawn_forked(spec("echo.py", Sandbox::disabled()), options(), &liar).unwrap();
    assert_eq!(trusted.request(json!({"op": "ping"}), REPLY).unwrap()["echo"]["op"], "ping");
    liar.shutdown();
}

#[test]
fn a_child_that_keeps_the_hosts_tmp_is_refused() {
    if let Err(why) = &cudal1_supervisor::sandbox_support().pid_namespace {
        return crate::common::skip("a_child_that_keeps_the_hosts_tmp_is_refused", why);
    }
    let liar = zygote_running(&[fixtures().join("tmp_skipping_zygote.py").into()]);
    refuses_a_confined_child(&liar, "/tmp is the host's", "a child on the host's /tmp");
    liar.shutdown();
}

#[test]
fn workers_die_with_their_fork_server_and_say_so() {
    let zygote = private_zygote();
    let mut echo =
        Worker::spawn_forked(spec("echo.py", Sandbox::strict()), options(), &zygote).unwrap();
    assert_eq!(echo.request(json!({"op": "ping"}), REPLY).unwrap()["echo"]["op"], "ping");
    let pid = echo.pid();
    zygote.shutdown();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while zygote.dead().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(zygote.dead().is_some(), "the fork server did not end");
    match echo.request(json!({"op": "ping"}), REPLY) {
        Err(WorkerError::Exited { .. }) => {}
        other => panic!("a worker whose fork server ended answered: {other:?}"),
    }
    drop(echo);
    assert!(gone(pid), "worker {pid} outlived its fork server");
    match Worker::spawn_forked(spec("echo.py", Sandbox::disabled()), options(), &zygote) {
        Err(SpawnError::Zygote { .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("an ended fork server forked"),
    }
}

#[test]
fn a_fork_server_forks_only_its_own_interpreter() {
    let zygote = private_zygote();
    let mut other = spec("echo.py", Sandbox::disabled());
    other.program = "/bin/sh".into();
    assert!(matches!(
        Worker::spawn_forked(other, SpawnOptions::default(), &zygote),
        Err(SpawnError::Zygote { .. })
    ));
    zygote.shutdown();
}

#[test]
fn a_fork_server_with_threads_forks_nothing_and_says_it_is_unfit() {
    // fork() copies one thread: a lock another thread held would stay held in every child.
    let zygote = zygote_running(&[
        "-m".into(),
        "cudal1_runner.zygote".into(),
        "--preload".into(),
        "threaded".into(),
    ]);
    match Worker::spawn_forked(spec("echo.py", Sandbox::disabled()), options(), &zygote) {
        Err(SpawnError::Zygote { detail, .. }) => assert!(detail.contains("threads"), "{detail}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a fork server with two threads forked"),
    }
    assert!(zygote.unfit(), "the fork server did not say why it cannot fork");
    assert!(zygote.dead().is_some());
}

#[test]
fn ending_a_fork_server_reaps_it_and_its_children_end_first() {
    let zygote = private_zygote();
    let mut echo =
        Worker::spawn_forked(spec("echo.py", Sandbox::strict()), options(), &zygote).unwrap();
    assert_eq!(echo.request(json!({"op": "ping"}), REPLY).unwrap()["echo"]["op"], "ping");
    let (child, server) = (echo.pid(), zygote.pid());
    assert!(zygote.end(Duration::from_secs(10)), "the fork server was not reaped");
    // Reaped: no process, not even a zombie, has its pid.
    assert!(
        !std::path::Path::new(&format!("/proc/{server}")).exists(),
        "the fork server {server} is left"
    );
    drop(echo);
    assert!(gone(child), "worker {child} outlived its fork server");
    // One still importing (it reads its input only once ready) is killed at once.
    let slow = zygote_running(&[
        "-m".into(),
        "cudal1_runner.zygote".into(),
        "--preload".into(),
        "torch".into(),
    ]);
    let started = std::time::Instant::now();
    assert!(slow.end(Duration::from_secs(30)));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}
