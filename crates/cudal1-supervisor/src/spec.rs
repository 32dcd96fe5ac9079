//! What to start and under which limits: plain data, no behaviour.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Everything needed to start one worker process.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// For logs and errors, e.g. "candidate 3f2a… on cuda:0".
    pub label: String,
    /// An absolute path: the environment is cleared, so there is no `PATH` to search.
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    /// The complete environment: the parent's is never inherited.
    pub env: Vec<(OsString, OsString)>,
    pub sandbox: Sandbox,
}

/// Confinement of an untrusted worker. `enabled: false` is a trusted process: its own
/// session and process group, the given environment, nothing else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sandbox {
    pub enabled: bool,
    /// `false`: a new, empty network namespace (and no TCP through Landlock).
    pub network: bool,
    /// The only places it may write, besides the device files CUDA needs (not `/dev/shm`).
    pub write_paths: Vec<PathBuf>,
    /// When non-empty, reads are limited to these, `write_paths`, the system directories and
    /// the interpreter's prefix.
    pub read_paths: Vec<PathBuf>,
    /// `RLIMIT_CPU` (soft; the hard limit is one second later).
    pub cpu_seconds: Option<u64>,
    /// Host memory: cgroup `memory.max` where a cgroup can be made, else an RSS watchdog.
    pub memory_bytes: Option<u64>,
    /// cgroup `pids.max` where possible, else `RLIMIT_NPROC`.
    pub max_processes: Option<u64>,
    /// Abstract unix sockets made outside the sandbox may be reached: a profiler that
    /// injects itself into the process talks to its host that way. Signals stay scoped.
    pub outside_ipc: bool,
}

impl Sandbox {
    /// A trusted process: no confinement.
    #[must_use]
    pub fn disabled() -> Self {
        Self::default()
    }

    /// Confined: no network, no writes, reads unrestricted, no resource limits.
    #[must_use]
    pub fn strict() -> Self {
        Self { enabled: true, ..Self::default() }
    }
}

/// Tunables of the supervision itself; `Default` is what `Worker::spawn` uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnOptions {
    /// A stdout line longer than this is `LineTooLong` and the worker is killed.
    pub line_limit: usize,
    /// How much of the end of stderr is kept.
    pub stderr_tail_bytes: usize,
    /// Between SIGTERM and SIGKILL when a request times out or the protocol breaks.
    pub kill_grace: Duration,
    /// How long the rest of the group and the pipes may outlive the leader before it counts
    /// as a leak (nextest's leak timeout).
    pub leak_grace: Duration,
}

/// 64 MiB: the protocol's replies are small; outputs travel through files.
pub const DEFAULT_LINE_LIMIT: usize = 64 << 20;
/// 64 KiB of stderr is plenty for a traceback and bounds memory per worker.
pub const DEFAULT_STDERR_TAIL: usize = 64 << 10;

impl Default for SpawnOptions {
    fn default() -> Self {
        Self {
            line_limit: DEFAULT_LINE_LIMIT,
            stderr_tail_bytes: DEFAULT_STDERR_TAIL,
            kill_grace: Duration::from_secs(2),
            leak_grace: Duration::from_millis(200),
        }
    }
}
