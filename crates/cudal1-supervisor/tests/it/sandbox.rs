// Each escape a sandboxed worker might try, and that it fails (and works without the sandbox, so
// the test would notice a broken probe). Where this machine lacks the mechanism, the test says so
// and skips. Included twice by main.rs: `FORKED` says whether the workers are exec'd or forked
// from a fork server.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use cudal1_supervisor::{
    sandbox_support, LimitHit, MemoryLimitMechanism, Outcome, ProcessLimitMechanism, Sandbox, Worker, WorkerError,
};
use serde_json::{json, Value};

use crate::common::{base_env, fixtures, host_pid, in_pid_namespace, skip, spec, start, start_time, vanished, REPLY};

fn probe(sandbox: Sandbox) -> Worker {
    start(spec("probe.py", sandbox), FORKED).unwrap()
}

fn ask(worker: &mut Worker, request: Value) -> Value {
    match worker.request(request, REPLY) {
        Ok(reply) => reply,
        Err(e) => panic!("{e}\nstderr:\n{}", worker.stderr_tail()),
    }
}

fn confined() -> Sandbox {
    Sandbox { enabled: true, ..Sandbox::default() }
}

#[test]
fn support_is_reported() {
    // Not an assertion about this machine: a record in the test log of what ran for real.
    eprintln!("sandbox support: {:#?}", sandbox_support());
}

#[test]
fn the_environment_is_only_what_was_given() {
    for sandbox in [Sandbox::disabled(), confined()] {
        let mut worker = probe(sandbox.clone());
        // A forked worker's `/proc/self/environ` is the fork server's start-up environment; its
        // own is what it runs with.
        let reply = ask(&mut worker, json!({"op": if FORKED { "os_environ" } else { "env" }}));
        let env: BTreeMap<String, String> = serde_json::from_value(reply["env"].clone()).unwrap();
        let given: BTreeMap<String, String> = base_env()
            .into_iter()
            .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
            .collect();
        assert_eq!(env, given, "sandbox enabled: {}", sandbox.enabled);
    }
}

#[test]
fn no_network_inside_the_sandbox() {
    let support = sandbox_support();
    if !support.network_namespace && support.landlock.is_none_or(|abi| abi < 4) {
        return skip("no_network_inside_the_sandbox", "neither network namespaces nor Landlock ABI >= 4");
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();

    let mut open = probe(Sandbox::disabled());
    let reply = ask(&mut open, json!({"op": "connect", "port": port}));
    assert_eq!(reply["ok"], true, "without the sandbox the connection must work: {reply}");

    let mut closed = probe(confined());
    let reply = ask(&mut closed, json!({"op": "connect", "port": port}));
    assert_eq!(reply["ok"], false, "the sandbox let a TCP connection through: {reply}");

    // `network: true` keeps it.
    let mut allowed = probe(Sandbox { network: true, ..confined() });
    let reply = ask(&mut allowed, json!({"op": "connect", "port": port}));
    assert_eq!(reply["ok"], true, "network: true must keep the network: {reply}");
}

/// A directory the host's and a sandboxed worker's file systems share (not below `/tmp`).
fn outside_tmp() -> tempfile::TempDir {
    // A checkout below /tmp (a CI runner's, `git clone . /tmp/fresh`) has its target there too,
    // which a sandboxed worker's own /tmp does not show: then /var/tmp.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tempfile::tempdir_in(if target.starts_with("/tmp") { Path::new("/var/tmp") } else { target })
        .unwrap()
}

/// What a sandboxed worker's own /tmp shows beside its scratch directory: the paths it is given
/// that lie below the host's /tmp are bound back there, so a checkout below /tmp (its fixtures,
/// its interpreter) appears by its first name below /tmp.
fn checkout_in_tmp() -> Option<String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).canonicalize().unwrap();
    let below = repo.strip_prefix("/tmp").ok()?;
    Some(below.components().next()?.as_os_str().to_str()?.to_owned())
}

fn require_landlock(test: &str) -> bool {
    if sandbox_support().landlock.is_none() {
        skip(test, "Landlock is not available");
        return false;
    }
    true
}

#[test]
fn writes_only_inside_write_paths() {
    if !require_landlock("writes_only_inside_write_paths") {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    // Outside /tmp: a sandboxed worker's /tmp is its own (each_worker_has_a_tmp_of_its_own).
    let elsewhere = outside_tmp();
    let mut worker = probe(Sandbox { write_paths: vec![scratch.path().into()], ..confined() });

    let inside = scratch.path().join("ok.txt");
    let reply = ask(&mut worker, json!({"op": "write", "path": inside}));
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "written from the sandbox");

    let outside = elsewhere.path().join("escape.txt");
    let reply = ask(&mut worker, json!({"op": "write", "path": outside}));
    assert_eq!(reply["ok"], false, "{reply}");
    assert!(reply["error"].as_str().unwrap().contains("PermissionError"), "{reply}");
    assert!(!outside.exists());

    // The fixtures directory is readable but not writable.
    let reply = ask(&mut worker, json!({"op": "write", "path": fixtures().join("planted.py")}));
    assert_eq!(reply["ok"], false, "{reply}");
}

#[test]
fn reads_are_limited_when_read_paths_are_given() {
    if !require_landlock("reads_are_limited_when_read_paths_are_given") {
        return;
    }
    let secret_dir = outside_tmp();
    let secret = secret_dir.path().join("expected_output.txt");
    std::fs::write(&secret, "the reference answer").unwrap();
    let allowed_dir = outside_tmp();
    let allowed = allowed_dir.path().join("input.txt");
    std::fs::write(&allowed, "an input").unwrap();

    // Without read_paths, reads are not limited (only writes are).
    let mut open = probe(confined());
    assert_eq!(ask(&mut open, json!({"op": "read", "path": secret}))["value"], "the reference answer");

    let mut limited = probe(Sandbox { read_paths: vec![fixtures(), allowed_dir.path().into()], ..confined() });
    let reply = ask(&mut limited, json!({"op": "read", "path": secret}));
    assert_eq!(reply["ok"], false, "read outside read_paths: {reply}");
    assert!(reply["error"].as_str().unwrap().contains("PermissionError"), "{reply}");
    assert_eq!(ask(&mut limited, json!({"op": "read", "path": allowed}))["value"], "an input");
    // System files stay readable.
    assert_eq!(ask(&mut limited, json!({"op": "read", "path": "/etc/hostname"}))["ok"], Path::new("/etc/hostname").exists());
    // So does /proc, the one mounted for its own PID namespace too, and it may name its own
    // threads there, as CUDA does when it starts.
    for path in ["/proc/self/status", "/proc/cpuinfo"] {
        let reply = ask(&mut limited, json!({"op": "read", "path": path}));
        assert_eq!(reply["ok"], true, "{path}: {reply}");
    }
    let reply = ask(&mut limited, json!({"op": "write", "path": "/proc/thread-self/comm"}));
    assert_eq!(reply["ok"], true, "{reply}");
}

#[test]
fn files_under_etc_that_not_every_user_may_read_are_not_readable_inside_the_sandbox() {
    if !require_landlock("files_under_etc_that_not_every_user_may_read_are_not_readable_inside_the_sandbox") {
        return;
    }
    let shadow = Path::new("/etc/shadow");
    if !shadow.exists() {
        return skip("files_under_etc_that_not_every_user_may_read_are_not_readable_inside_the_sandbox", "no /etc/shadow here");
    }
    let mut limited = probe(Sandbox { read_paths: vec![fixtures()], ..confined() });
    let reply = ask(&mut limited, json!({"op": "read", "path": shadow}));
    assert_eq!(reply["ok"], false, "a sandboxed worker read /etc/shadow: {reply}");
    assert!(reply["error"].as_str().unwrap().contains("PermissionError"), "{reply}");
    // What any user may read stays readable.
    assert_eq!(ask(&mut limited, json!({"op": "read", "path": "/etc/passwd"}))["ok"], Path::new("/etc/passwd").exists());
    if sandbox_support().root {
        // As root, without read rules, the same request reads it: the probe works.
        let mut open = probe(confined());
        assert_eq!(ask(&mut open, json!({"op": "read", "path": shadow}))["ok"], true);
    }
}

#[test]
fn process_count_is_bounded() {
    let support = sandbox_support();
    if support.process_limit == ProcessLimitMechanism::Unenforced {
        return skip("process_count_is_bounded", "running as root without a pids cgroup: nothing can bound processes");
    }
    let limit = 8;
    let mut worker = probe(Sandbox { max_processes: Some(limit), ..confined() });
    let reply = ask(&mut worker, json!({"op": "fork", "target": 64}));
    let forked = reply["forked"].as_u64().unwrap();
    assert!(forked < limit, "forked {forked} children under a limit of {limit}: {reply}");
    assert!(reply["error"].is_string(), "{reply}");
    ask(&mut worker, json!({"op": "shutdown"}));
    assert_eq!(worker.wait(REPLY), Some(Outcome::Exited(0)));
    if let ProcessLimitMechanism::Cgroup(_) = support.process_limit {
        assert_eq!(worker.limit_hit(), Some(LimitHit::Processes { limit }));
    }
    // Without the sandbox the same request forks them all.
    let mut free = probe(Sandbox::disabled());
    assert_eq!(ask(&mut free, json!({"op": "fork", "target": 64}))["forked"], 64);
}

#[test]
fn a_memory_hog_is_killed() {
    let limit = 256 << 20;
    eprintln!("memory limit through {:?}", sandbox_support().memory_limit);
    let mut worker = probe(Sandbox { memory_bytes: Some(limit), ..confined() });
    match worker.request(json!({"op": "hog", "max_mib": 2048}), REPLY) {
        Err(e @ WorkerError::Exited { .. }) => {
            let WorkerError::Exited { outcome, limit: hit, .. } = &e else { unreachable!() };
            assert_eq!(outcome.leader_signal(), Some(libc::SIGKILL), "{outcome}");
            let Some(LimitHit::Memory { limit_bytes, peak_bytes }) = *hit else { panic!("{hit:?}") };
            assert_eq!(limit_bytes, limit);
            // The size it reached: near the limit at least (the watchdog samples, a cgroup holds it at the limit).
            let peak = peak_bytes.expect("the size it reached is known");
            assert!(peak > limit / 2, "peak {peak} under a limit of {limit}");
            assert_eq!(worker.peak_memory(), Some(peak));
            assert!(e.to_string().contains("out of memory: over its limit of 256 MiB after reaching"), "{e}");
        }
        other => panic!("expected the hog to be killed, got {other:?}"),
    }
    if sandbox_support().memory_limit == MemoryLimitMechanism::RssWatchdog {
        eprintln!("note: enforced by the RSS watchdog, not a cgroup");
    }
}

#[test]
fn a_cpu_spinner_is_killed() {
    let mut worker = probe(Sandbox { cpu_seconds: Some(1), ..confined() });
    match worker.request(json!({"op": "spin"}), REPLY) {
        Err(WorkerError::Exited { outcome, limit, .. }) => {
            assert_eq!(outcome, Outcome::Signaled { signal: libc::SIGXCPU, name: "SIGXCPU".into() });
            assert_eq!(limit, Some(LimitHit::Cpu { limit_seconds: 1 }));
        }
        other => panic!("expected SIGXCPU, got {other:?}"),
    }
}

#[test]
fn capabilities_are_dropped() {
    if !sandbox_support().root {
        return skip("capabilities_are_dropped", "not root: there are no capabilities to drop");
    }
    let mut worker = probe(confined());
    let caps = ask(&mut worker, json!({"op": "caps"}))["caps"].clone();
    for key in ["CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"] {
        assert_eq!(caps[key].as_str().map(|v| v.trim_start_matches('0')), Some(""), "{key}: {caps}");
    }
    let mut trusted = probe(Sandbox::disabled());
    let caps = ask(&mut trusted, json!({"op": "caps"}))["caps"].clone();
    assert_ne!(caps["CapEff"].as_str().unwrap().trim_start_matches('0'), "", "{caps}");
}

#[test]
fn no_signals_leave_the_sandbox() {
    if sandbox_support().landlock.is_none_or(|abi| abi < 6) {
        return skip("no_signals_leave_the_sandbox", "Landlock ABI < 6 has no signal scoping");
    }
    let me = std::process::id();
    let mut worker = probe(confined());
    let reply = ask(&mut worker, json!({"op": "kill", "pid": me}));
    assert_eq!(reply["ok"], false, "the sandbox could signal the supervisor: {reply}");
    let mut trusted = probe(Sandbox::disabled());
    assert_eq!(ask(&mut trusted, json!({"op": "kill", "pid": me}))["ok"], true);
}

#[test]
fn a_missing_write_path_fails_the_spawn() {
    if !require_landlock("a_missing_write_path_fails_the_spawn") {
        return;
    }
    let missing = PathBuf::from("/nonexistent/cudal1-scratch");
    let result = start(spec("probe.py", Sandbox { write_paths: vec![missing], ..confined() }), FORKED);
    match result {
        Err(e) => assert!(e.to_string().contains("Landlock"), "{e}"),
        Ok(_) => panic!("spawned with a missing write path"),
    }
}

/// Only where a GPU is: CUDA and a `load_inline` build must work inside a realistic
/// candidate sandbox (no network, writes only to scratch, limits on).
#[test]
fn cuda_runs_inside_the_sandbox() {
    if !Path::new("/dev/nvidiactl").exists() {
        return skip("cuda_runs_inside_the_sandbox", "no NVIDIA GPU on this machine");
    }
    let scratch = tempfile::tempdir().unwrap();
    let mut env = base_env();
    for (key, value) in [
        ("TMPDIR", scratch.path().to_path_buf()),
        ("HOME", scratch.path().to_path_buf()),
        ("TORCH_EXTENSIONS_DIR", scratch.path().join("extensions")),
        ("TRITON_CACHE_DIR", scratch.path().join("triton")),
    ] {
        env.push((key.into(), value.into()));
    }
    env.push(("TORCH_CUDA_ARCH_LIST".into(), "9.0".into()));
    for key in ["PATH", "CUDA_HOME", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"] {
        if let Some(value) = std::env::var_os(key) {
            env.push((key.into(), value));
        }
    }
    let limits = Sandbox {
        write_paths: vec![scratch.path().into()],
        memory_bytes: Some(16 << 30),
        max_processes: Some(512),
        cpu_seconds: Some(600),
        ..confined()
    };
    for (sandbox, inline) in [(limits.clone(), true), (Sandbox { read_paths: vec![fixtures()], ..limits }, false)] {
        let mut s = spec("probe.py", sandbox.clone());
        s.env = env.clone();
        let mut worker = start(s, FORKED).unwrap();
        let reply = match worker.request(json!({"op": "cuda", "inline": inline}), std::time::Duration::from_secs(400)) {
            Ok(reply) => reply,
            Err(e) => panic!("{e}\nstderr:\n{}", worker.stderr_tail()),
        };
        eprintln!("cuda in sandbox (read_paths {:?}): {reply}", sandbox.read_paths);
        assert_eq!(reply["ok"], true, "{reply}\nstderr:\n{}", worker.stderr_tail());
        assert_eq!(reply["value"]["finite"], true);
        if inline {
            assert_eq!(reply["value"]["inline_sum"], 1000.0);
        }
    }
}

/// cudal1's scratch directories (the reference's expected outputs among them) live under
/// `/dev/shm` on large hosts: a sandboxed worker may use its own directory there and nothing else.
#[test]
fn dev_shm_outside_the_scratch_is_neither_readable_nor_writable() {
    if !require_landlock("dev_shm_outside_the_scratch_is_neither_readable_nor_writable") {
        return;
    }
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return skip("dev_shm_outside_the_scratch_is_neither_readable_nor_writable", "no /dev/shm");
    }
    let root = tempfile::tempdir_in(shm).unwrap();
    let expected = root.path().join("reference-1");
    std::fs::create_dir(&expected).unwrap();
    let secret = expected.join("seed-1.pt");
    std::fs::write(&secret, "the reference answer").unwrap();
    let scratch = root.path().join("candidate-1");
    std::fs::create_dir(&scratch).unwrap();
    let sandbox = Sandbox { read_paths: vec![fixtures(), scratch.clone()], write_paths: vec![scratch.clone()], ..confined() };

    // The probe works: without the sandbox everything is reachable.
    let mut open = probe(Sandbox::disabled());
    assert_eq!(ask(&mut open, json!({"op": "read", "path": secret}))["value"], "the reference answer");

    let mut worker = probe(sandbox);
    for request in [
        json!({"op": "read", "path": secret}),
        json!({"op": "list", "path": root.path()}),
        json!({"op": "list", "path": "/dev/shm"}),
        json!({"op": "write", "path": secret}),
        json!({"op": "write", "path": expected.join("planted.pt")}),
        json!({"op": "write", "path": "/dev/shm/cudal1-planted"}),
    ] {
        let reply = ask(&mut worker, request.clone());
        assert_eq!(reply["ok"], false, "{request} was allowed: {reply}");
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "the reference answer");
    assert!(!Path::new("/dev/shm/cudal1-planted").exists());
    // Its own directory there is its to use.
    let own = scratch.join("out.pt");
    assert_eq!(ask(&mut worker, json!({"op": "write", "path": own}))["ok"], true);
    assert_eq!(ask(&mut worker, json!({"op": "read", "path": own}))["ok"], true);
}

#[test]
fn no_namespaces_can_be_made_inside_the_sandbox() {
    let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNET;
    let mut trusted = probe(Sandbox::disabled());
    let works = ask(&mut trusted, json!({"op": "unshare", "flags": flags}));
    if works["ok"] != true {
        return skip("no_namespaces_can_be_made_inside_the_sandbox", "this machine allows no new namespaces anyway");
    }
    let mut worker = probe(confined());
    for flags in [flags, libc::CLONE_NEWNET, libc::CLONE_NEWUSER, libc::CLONE_NEWNS] {
        let reply = ask(&mut worker, json!({"op": "unshare", "flags": flags}));
        assert_eq!(reply["ok"], false, "unshare({flags:#x}) worked in the sandbox: {reply}");
    }
    // Forking, threads and subprocesses still work (clone without namespace flags, clone3 falls back).
    assert_eq!(ask(&mut worker, json!({"op": "fork", "target": 3}))["forked"], 3);
    assert_eq!(ask(&mut worker, json!({"op": "burn", "seconds": 0.01}))["ok"], true);
}

/// The pid here of the process that a worker's reply names by its pid there.
fn outside(worker: &Worker, reply: &Value) -> u32 {
    let inner = u32::try_from(reply["value"].as_u64().unwrap_or_else(|| panic!("{reply}"))).unwrap();
    match worker.pid_namespace() {
        Some(ns) => host_pid(ns, inner).unwrap_or_else(|| panic!("no process {inner} in the worker's PID namespace")),
        None => inner,
    }
}

#[test]
fn a_double_forked_daemon_is_found_outside_the_group_and_killed() {
    let support = sandbox_support();
    if !support.network_namespace && !support.cgroup {
        return skip("a_double_forked_daemon_is_found_outside_the_group_and_killed", "neither network namespaces nor cgroups");
    }
    let mut worker = probe(confined());
    assert!(worker.escaped().is_empty());
    let reply = ask(&mut worker, json!({"op": "daemon"}));
    let daemon = outside(&worker, &reply);
    assert!(!crate::common::gone(daemon), "the daemon did not start");
    assert_eq!(worker.escaped(), vec![daemon]);
    let deadline = std::time::Instant::now() + REPLY;
    while !crate::common::gone(daemon) {
        assert!(std::time::Instant::now() < deadline, "the daemon {daemon} survived");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(worker.escaped().is_empty());

    // A daemon left running when the worker ends is killed with it: by the kernel, with the
    // worker's PID namespace, before its end is known; else by the supervisor, as a leak.
    let mut worker = probe(confined());
    let reply = ask(&mut worker, json!({"op": "daemon"}));
    let daemon = outside(&worker, &reply);
    let started = start_time(daemon).unwrap();
    ask(&mut worker, json!({"op": "shutdown"}));
    let outcome = worker.wait(REPLY).unwrap();
    if worker.pid_namespace().is_some() {
        assert_eq!(outcome, Outcome::Exited(0));
        assert!(vanished(daemon, started), "the daemon {daemon} outlived its PID namespace");
    } else {
        assert!(matches!(&outcome, Outcome::Leaked { survivors, .. } if survivors.contains(&daemon)), "{outcome}");
        assert!(crate::common::gone(daemon) || { std::thread::sleep(std::time::Duration::from_millis(100)); crate::common::gone(daemon) });
    }
}

/// A process's resource limit on file sizes, nice value and CPU affinity, as another sees them.
fn settings_of(pid: u32) -> (u64, i32, Vec<u8>) {
    let pid = pid as libc::pid_t;
    // SAFETY: plain out-parameters of the right types; the pid is a live process's.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::prlimit(pid, libc::RLIMIT_FSIZE, std::ptr::null(), &mut limit), 0);
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, pid as libc::id_t);
        assert_eq!(*libc::__errno_location(), 0);
        let mut cpus: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut cpus), 0);
        let bytes = std::slice::from_raw_parts((&raw const cpus).cast::<u8>(), std::mem::size_of::<libc::cpu_set_t>()).to_vec();
        (limit.rlim_cur, nice, bytes)
    }
}

#[test]
fn no_process_outside_the_sandbox_can_be_reached_by_pid() {
    // prlimit, setpriority and sched_setaffinity need only the same user, and neither Landlock
    // nor seccomp covers them: RLIMIT_FSIZE=0 on the supervisor killed it with SIGXFSZ.
    if let Err(why) = &sandbox_support().pid_namespace {
        return skip("no_process_outside_the_sandbox_can_be_reached_by_pid", why);
    }
    // The test process is the supervisor; a forked worker's parent is the fork server.
    let mut targets = vec![std::process::id()];
    if FORKED {
        targets.push(crate::common::zygote().pid());
    }
    let before: Vec<_> = targets.iter().map(|&p| settings_of(p)).collect();
    // The probe works: a trusted worker reaches them all (and changes nothing: it sets what is).
    let mut trusted = probe(Sandbox::disabled());
    let reply = ask(&mut trusted, json!({"op": "reach", "pids": targets}));
    for target in &targets {
        let tried = reply["targets"][target.to_string()].as_object().unwrap_or_else(|| panic!("{reply}"));
        assert!(tried.values().all(|ok| ok == true), "a trusted worker could not reach {target}: {reply}");
    }

    let mut worker = probe(confined());
    let ns = worker.pid_namespace();
    let reply = ask(&mut worker, json!({"op": "reach", "pids": targets, "prio_user": true}));
    assert!(ns.is_some(), "the worker got no PID namespace of its own: {reply}");
    assert_eq!(reply["parent"], 0, "its parent is in its sight: {reply}");
    for (name, tried) in reply["targets"].as_object().unwrap() {
        for (call, ok) in tried.as_object().unwrap() {
            assert_eq!(ok, false, "{call} on {name} worked from the sandbox: {reply}");
        }
    }
    // PRIO_USER reaches every process of its user that it can see: its own.
    assert_eq!(reply["prio_user"]["ok"], true, "{reply}");
    let after: Vec<_> = targets.iter().map(|&p| settings_of(p)).collect();
    assert_eq!(before, after, "the sandbox changed a process outside it");
    assert!(worker.is_alive());
}

#[test]
fn orphans_are_counted_while_they_run_and_gone_with_their_worker() {
    // A double fork without setsid keeps the grandchild in the worker's process group but out of
    // its descendants (its CPU time counted as 0); with setsid it also leaves the group. Either
    // way it must be counted while it runs, and leave no trace, not even a zombie, once the
    // worker has ended.
    if let Err(why) = &sandbox_support().pid_namespace {
        return skip("orphans_are_counted_while_they_run_and_gone_with_their_worker", why);
    }
    for setsid in [false, true] {
        let mut worker = probe(confined());
        let before = worker.cpu_time();
        let reply = ask(&mut worker, json!({"op": "daemon", "setsid": setsid, "spin": true}));
        let daemon = outside(&worker, &reply);
        let deadline = std::time::Instant::now() + REPLY;
        while worker.cpu_time().saturating_sub(before) < std::time::Duration::from_millis(300) {
            assert!(std::time::Instant::now() < deadline, "the spinning orphan's CPU time was not counted (setsid: {setsid})");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Everything of the worker: its leader, and its namespace's processes (the daemon among them).
        let mut processes = vec![(worker.pid(), start_time(worker.pid()).unwrap())];
        if let Some(ns) = worker.pid_namespace() {
            processes.extend(in_pid_namespace(ns).into_iter().map(|(pid, _, start)| (pid, start)));
        }
        assert!(processes.iter().any(|&(pid, _)| pid == daemon), "{processes:?}");
        ask(&mut worker, json!({"op": "shutdown"}));
        let outcome = worker.wait(REPLY).unwrap();
        assert_eq!(outcome, Outcome::Exited(0), "setsid: {setsid}: nothing may be left to find once the worker has ended");
        for (pid, start) in processes {
            assert!(vanished(pid, start), "process {pid} of the worker is still there (setsid: {setsid})");
        }
    }
}

#[test]
fn cpu_time_counts_children_that_were_waited_for() {
    let mut worker = probe(confined());
    let before = worker.cpu_time();
    assert_eq!(ask(&mut worker, json!({"op": "burn", "seconds": 0.3}))["ok"], true);
    let used = worker.cpu_time().saturating_sub(before);
    assert!(used >= std::time::Duration::from_millis(200), "{used:?}");
}

#[test]
fn a_finished_workers_network_namespace_never_names_the_next_workers_processes() {
    // The kernel gives a freed namespace's number to the next one made. A worker whose leader
    // has ended but whose handle lives on (being reaped, or cleaned up after) must not take the
    // next worker's processes for its own and kill them: the namespace is held while it lives.
    if !sandbox_support().network_namespace {
        return skip("a_finished_workers_network_namespace_never_names_the_next_workers_processes", "no network namespaces");
    }
    let mut first = probe(confined());
    let Some(ns) = first.net_namespace() else {
        return skip("a_finished_workers_network_namespace_never_names_the_next_workers_processes", "the worker kept this process's namespace");
    };
    let pid = first.pid();
    // SAFETY: kill has no memory-safety preconditions; the pid is the worker's, not yet reaped.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    let deadline = std::time::Instant::now() + REPLY;
    while !crate::common::gone(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The kernel frees a network namespace in the background, some time after its last process
    // ended: new workers keep coming for a while.
    let mut next: Vec<Worker> = Vec::new();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < until {
        let w = probe(confined());
        assert_ne!(w.net_namespace(), Some(ns), "worker {} got the namespace of one whose handle still lives", next.len());
        next.push(w);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(first.wait(REPLY).is_some(), "the first worker is reaped");
    drop(first);
    for w in &mut next {
        ask(w, json!({"op": "env"}));
    }
}

#[test]
fn a_confined_workers_end_is_its_runners() {
    // In a PID namespace of its own the worker's leader is a keeper that ends as the runner ended:
    // the same exit code, the same signal, and the runner's peak memory in its own.
    let mut worker = start(spec("echo.py", confined()), FORKED).unwrap();
    match worker.request(json!({"op": "exit", "code": 3, "message": "dying on purpose"}), REPLY) {
        Err(WorkerError::Exited { outcome, stderr_tail, .. }) => {
            assert_eq!(outcome, Outcome::Exited(3));
            assert!(stderr_tail.contains("dying on purpose"), "{stderr_tail}");
        }
        other => panic!("expected Exited(3), got {other:?}"),
    }
    let mut worker = start(spec("segfault.py", confined()), FORKED).unwrap();
    match worker.request(json!({}), REPLY) {
        Err(WorkerError::Exited { outcome, .. }) => assert_eq!(outcome, Outcome::Signaled { signal: libc::SIGSEGV, name: "SIGSEGV".into() }),
        other => panic!("expected SIGSEGV, got {other:?}"),
    }
    // SIGTERM to the group: the runner takes it (an init would ignore it), the keeper ignores it.
    let mut worker = start(spec("hang.py", confined()), FORKED).unwrap();
    assert!(worker.request(json!({}), std::time::Duration::from_millis(200)).is_err());
    let mut worker = start(spec("hang.py", confined()), FORKED).unwrap();
    assert_eq!(worker.wait(std::time::Duration::from_millis(50)), None);
    assert_eq!(worker.terminate(std::time::Duration::from_secs(20)), Outcome::Signaled { signal: libc::SIGTERM, name: "SIGTERM".into() });
    // 256 MiB held by the runner, nothing like it by the supervisor or the fork server.
    let mut worker = probe(confined());
    assert_eq!(ask(&mut worker, json!({"op": "hog", "max_mib": 256}))["allocated_mib"], 256);
    ask(&mut worker, json!({"op": "shutdown"}));
    assert_eq!(worker.wait(REPLY), Some(Outcome::Exited(0)));
    let peak = worker.peak_memory().unwrap();
    assert!(peak >= 256 << 20, "peak {peak}");
}

#[test]
fn each_worker_has_a_tmp_of_its_own() {
    if let Err(why) = &sandbox_support().pid_namespace {
        return skip("each_worker_has_a_tmp_of_its_own", &format!("no PID namespace (so no mount namespace): {why}"));
    }
    // Its scratch directory below the host's /tmp, as tests and CI have it.
    let scratch = tempfile::Builder::new().prefix("cudal1-scratch-").tempdir_in("/tmp").unwrap();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let dir = PathBuf::from(format!("/tmp/cudal1-probe-{}-{nanos}-{FORKED}", std::process::id()));
    let planted = dir.join("planted.txt");
    let host_file = scratch.path().with_extension("host");
    std::fs::write(&host_file, "the host's").unwrap();
    let limited = Sandbox {
        write_paths: vec![scratch.path().into()],
        read_paths: vec![fixtures(), scratch.path().into()],
        ..confined()
    };
    let open_reads = Sandbox { write_paths: vec![scratch.path().into()], ..confined() };
    for sandbox in [limited, open_reads] {
        let reads = if sandbox.read_paths.is_empty() { "open" } else { "limited" };
        let mut first = probe(sandbox.clone());
        assert_eq!(ask(&mut first, json!({"op": "mkdir", "path": dir}))["ok"], true, "reads {reads}");
        let reply = ask(&mut first, json!({"op": "write", "path": planted}));
        assert_eq!(reply["ok"], true, "a write below /tmp failed (reads {reads}): {reply}");
        assert_eq!(ask(&mut first, json!({"op": "read", "path": planted}))["value"], "written from the sandbox");
        // Not on the host's /tmp, and the host's /tmp is not its: a file there is not to be seen.
        assert!(!dir.exists(), "{} reached the host's /tmp", dir.display());
        let reply = ask(&mut first, json!({"op": "read", "path": host_file}));
        assert!(reply["error"].as_str().unwrap_or("").contains("FileNotFoundError"), "reads {reads}: {reply}");
        // Its scratch directory is the host's, at the same path.
        let inside = scratch.path().join(format!("ok-{reads}.txt"));
        assert_eq!(ask(&mut first, json!({"op": "write", "path": inside}))["ok"], true, "reads {reads}");
        assert_eq!(std::fs::read_to_string(&inside).unwrap(), "written from the sandbox");

        // A second worker, while the first still runs, and after it ended: nothing of the first's.
        let mut second = probe(sandbox.clone());
        let reply = ask(&mut second, json!({"op": "read", "path": planted}));
        assert!(reply["error"].as_str().unwrap_or("").contains("FileNotFoundError"), "reads {reads}: {reply}");
        drop(first);
        let mut third = probe(sandbox);
        let reply = ask(&mut third, json!({"op": "list", "path": "/tmp"}));
        let listed: Vec<String> = serde_json::from_value(reply["value"].clone()).unwrap();
        let scratch_name = scratch.path().file_name().unwrap().to_str().unwrap().to_owned();
        let mut expected: Vec<String> = [Some(scratch_name), checkout_in_tmp()].into_iter().flatten().collect();
        expected.sort();
        assert_eq!(listed, expected, "reads {reads}: its /tmp holds only its scratch directory (and the checkout)");
        assert!(!dir.exists());
    }
}

#[test]
fn what_it_may_only_read_below_tmp_stays_read_only_in_its_own_tmp() {
    if let Err(why) = &sandbox_support().pid_namespace {
        return skip(
            "what_it_may_only_read_below_tmp_stays_read_only_in_its_own_tmp",
            &format!("no PID namespace (so no mount namespace): {why}"),
        );
    }
    // Landlock's rule on the private /tmp covers what is mounted below it: a shelf the worker may
    // only read (a published build, the runner's package) must not become writable there.
    let base = tempfile::Builder::new().prefix("cudal1-shelf-").tempdir_in("/tmp").unwrap();
    let (scratch, shelf, out) =
        (base.path().join("scratch"), base.path().join("shelf"), base.path().join("shelf/out"));
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(shelf.join("published.so"), "the build").unwrap();
    let sandbox = Sandbox {
        write_paths: vec![scratch.clone(), out.clone()],
        read_paths: vec![fixtures(), scratch.clone(), shelf.clone()],
        ..confined()
    };
    let mut worker = probe(sandbox);
    let reply = ask(&mut worker, json!({"op": "read", "path": shelf.join("published.so")}));
    assert_eq!(reply["value"], "the build", "{reply}");
    for path in [shelf.join("published.so"), shelf.join("planted.so")] {
        let reply = ask(&mut worker, json!({"op": "write", "path": path}));
        assert_eq!(reply["ok"], false, "wrote {}: {reply}", path.display());
    }
    assert_eq!(std::fs::read_to_string(shelf.join("published.so")).unwrap(), "the build");
    assert!(!shelf.join("planted.so").exists());
    // What it may write stays writable, below the shelf too.
    for dir in [&scratch, &out] {
        let path = dir.join("ok.txt");
        let reply = ask(&mut worker, json!({"op": "write", "path": path}));
        assert_eq!(reply["ok"], true, "{}: {reply}", path.display());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "written from the sandbox");
    }
}
