//! Shared helpers: the interpreter, the fixtures, specs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use cudal1_supervisor::{Sandbox, SpawnError, SpawnOptions, Worker, WorkerSpec, Zygote};

/// Generous: only misbehaving workers run into it, and they have their own timeouts.
pub const REPLY: Duration = Duration::from_secs(30);

/// A real interpreter path (`python3` on PATH is often a shim script).
pub fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        if let Some(p) = std::env::var_os("CUDAL1_TEST_PYTHON") {
            return PathBuf::from(p);
        }
        let out = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 must be installed to run these tests");
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

pub fn fixtures() -> PathBuf {
    match std::env::var_os("CUDAL1_SUPERVISOR_FIXTURES") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
    }
}

/// The repository's `python/` directory (beside the fixtures' crate), which holds the fork server.
pub fn python_packages() -> PathBuf {
    fixtures().join("../../../../python")
}

pub fn base_env() -> Vec<(OsString, OsString)> {
    // LC_ALL stops Python from adding LC_CTYPE (PEP 538) to its own environment.
    vec![("PYTHONDONTWRITEBYTECODE".into(), "1".into()), ("LC_ALL".into(), "C.UTF-8".into())]
}

pub fn spec(fixture: &str, sandbox: Sandbox) -> WorkerSpec {
    WorkerSpec {
        label: format!("fixture {fixture}"),
        program: python().to_path_buf(),
        args: vec!["-u".into(), fixtures().join(fixture).into()],
        cwd: fixtures(),
        env: base_env(),
        sandbox,
    }
}

/// Short grace periods keep the tests fast; the leak window stays at its default.
pub fn options() -> SpawnOptions {
    SpawnOptions { kill_grace: Duration::from_millis(500), ..SpawnOptions::default() }
}

/// A pid that is neither running nor a zombie we could still be blamed for.
pub fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state =
                stat[stat.rfind(')').unwrap() + 1..].split_whitespace().next().unwrap().to_string();
            state == "Z" || state == "X"
        }
    }
}

pub fn skip(test: &str, reason: &str) {
    eprintln!("SKIP {test}: {reason}");
}

/// The fork server of these tests: the runner package's (`python/cudal1_runner/zygote.py`), with
/// torch imported first where the interpreter has it, as cudal1's runners' fork server does.
pub fn zygote() -> &'static Zygote {
    static ZYGOTE: OnceLock<Zygote> = OnceLock::new();
    ZYGOTE.get_or_init(|| {
        let has_torch = std::process::Command::new(python())
            .args(["-c", "import torch"])
            .status()
            .is_ok_and(|s| s.success());
        let mut args: Vec<OsString> = vec!["-m".into(), "cudal1_runner.zygote".into()];
        if has_torch {
            args.extend(["--preload".into(), "torch".into()]);
        }
        let python_dir = python_packages();
        let mut env = base_env();
        env.push(("PYTHONPATH".into(), python_dir.into()));
        // numpy's OpenBLAS (torch imports numpy) would start a thread per core, and a process
        // with threads must not fork: the zygote refuses to (as cudal1's runners' environment
        // says, one thread).
        env.push(("OPENBLAS_NUM_THREADS".into(), "1".into()));
        Zygote::start(python(), &args, &fixtures(), &env).expect("the fork server starts")
    })
}

/// Starts `spec` with [`options`]: exec'd, or forked from [`zygote`]. The test process is then
/// not dumpable, as cudal1 is not.
pub fn start(spec: WorkerSpec, forked: bool) -> Result<Worker, SpawnError> {
    cudal1_supervisor::deny_inspection().unwrap();
    if forked {
        Worker::spawn_forked(spec, options(), zygote())
    } else {
        Worker::spawn_with_options(spec, options())
    }
}

/// The inode of `pid`'s `kind` namespace (`net`, `pid`).
pub fn namespace_of(pid: u32, kind: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/{kind}")).ok().map(|m| m.ino())
}

/// When `pid` started (clock ticks since boot): with the pid, it names one process.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process `pid` that started at `start` has no trace left, not even a zombie.
pub fn vanished(pid: u32, start: u64) -> bool {
    start_time(pid) != Some(start)
}

/// The processes of the PID namespace `ns` (an inode): their pid here, their pid there, and when
/// they started.
pub fn in_pid_namespace(ns: u64) -> Vec<(u32, u32, u64)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if namespace_of(pid, "pid") != Some(ns) {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let inner = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|v| v.split_whitespace().last()?.parse().ok());
        if let (Some(inner), Some(start)) = (inner, start_time(pid)) {
            found.push((pid, inner, start));
        }
    }
    found
}

/// The pid here of the process that is `inner` in the PID namespace `ns`.
pub fn host_pid(ns: u64, inner: u32) -> Option<u32> {
    in_pid_namespace(ns).into_iter().find(|&(_, i, _)| i == inner).map(|(pid, _, _)| pid)
}
