//! Shared helpers: the interpreter, the fixtures, specs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use cudal1_supervisor::{Sandbox, SpawnOptions, WorkerSpec};

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
            let state = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().next().unwrap().to_string();
            state == "Z" || state == "X"
        }
    }
}

pub fn skip(test: &str, reason: &str) {
    eprintln!("SKIP {test}: {reason}");
}
