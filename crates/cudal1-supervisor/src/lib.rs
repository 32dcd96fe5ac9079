//! Spawns and supervises untrusted worker processes and talks to them over line-delimited
//! JSON. The main type is [`Worker`]: [`Worker::spawn`] starts a [`WorkerSpec`] as the
//! leader of its own session and process group, optionally inside a [`Sandbox`] (new
//! network and PID namespaces, Landlock, rlimits, a cgroup, no capabilities; in a PID namespace the
//! leader is a keeper outside it that ends as the worker's program ends: `pid_namespace.rs`);
//! [`Worker::request`] sends one JSON object and waits, with a timeout, for the reply with
//! the same id; [`Worker::terminate`] signals the group (SIGTERM, grace, SIGKILL) and
//! reports an [`Outcome`], `Leaked` when something outlived the leader. A sandboxed worker's
//! processes are also found by the network namespace it was started in, which a seccomp filter
//! keeps them from leaving: [`Worker::escaped`] names (and kills) those that left its process
//! group, a double-forked daemon in a session of its own included, with or without a cgroup;
//! [`Worker::cpu_time`] is the CPU time of the worker and its descendants, orphans included where
//! its PID namespace's init adopts them. Trusted processes call [`deny_inspection`]; the
//! supervising process calls [`orphans::adopt`] so that what its workers leave behind comes to it
//! and is reaped, and [`orphans::end`] before it exits. Modelled on how nextest supervises test
//! processes.
//!
//! Every Python child of cudal1 runs under this crate: the runners and the model worker as
//! [`Worker`]s, and children that speak no protocol (the interpreter probe, Nsight Compute's
//! profiled runs, `ncu --help`, `c++filt`) as [`Job`]s, each with a time limit, killed with its
//! process group and reaped when it outlives it. [`Worker::pause`]/[`Worker::resume`] stop and
//! continue a worker's group between requests; [`Worker::enlist`] enters one in the live-child
//! registry, and [`kill_under`] ends every enlisted worker below a directory (an engine stopping
//! at once).
//!
//! ```no_run
//! use std::time::Duration;
//! use cudal1_supervisor::{Sandbox, Worker, WorkerSpec};
//!
//! let mut worker = Worker::spawn(WorkerSpec {
//!     label: "runner".into(),
//!     program: "/usr/bin/python3".into(),
//!     args: vec!["-m".into(), "cudal1_runner".into(), "--role".into(), "candidate".into()],
//!     cwd: "/tmp".into(),
//!     env: vec![("PYTHONPATH".into(), "/opt/cudal1/python".into())],
//!     sandbox: Sandbox { enabled: true, write_paths: vec!["/tmp/scratch".into()], ..Sandbox::default() },
//! })?;
//! let hello = worker.request(serde_json::json!({"op": "hello"}), Duration::from_secs(30))?;
//! println!("{hello}");
//! let outcome = worker.terminate(Duration::from_secs(2));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Notes for callers:
//! - The environment is exactly `env`. Pass `PATH` if the worker runs tools (ninja, nvcc),
//!   and point `TMPDIR`, `HOME`, `TORCH_EXTENSIONS_DIR` and `TRITON_CACHE_DIR` into a write
//!   path: Landlock denies writes anywhere else. Where the worker gets a PID namespace it also
//!   gets a `/tmp` of its own, empty, which it may write ([`private_tmp_available`]); its paths
//!   below the host's `/tmp` stay where they are.
//! - Per-worker cgroups are children of the supervisor's own cgroup. cgroup v2 gives no
//!   controllers to children of a cgroup that has processes, so the supervisor moves itself
//!   into a leaf `cudal1-supervisor-<pid>` when it is alone in its cgroup (the empty leaf
//!   stays behind at exit). Otherwise memory limits fall back to an RSS watchdog and
//!   process limits to `RLIMIT_NPROC`, which root ignores; [`sandbox_support`] says which.
//!   Start the supervisor in a cgroup of its own to get cgroup limits.
//!
//! The host process must ignore SIGPIPE (Rust binaries do by default): a worker that closes
//! its stdin would otherwise kill the supervisor on the next write.

mod cgroup;
mod child_setup;
mod error;
mod job;
mod landlock_rules;
pub(crate) mod launch;
mod live;
pub mod orphans;
mod outcome;
mod pid_namespace;
mod pipes;
mod private_tmp;
mod procfs;
mod seccomp;
mod spawner;
mod spec;
mod support;
mod watchdog;
mod worker;
mod zygote;

pub use cgroup::CgroupVersion;
pub use error::{SpawnError, WorkerError};
pub use job::{CancelJob, Job, JobEnd, JobError, JobOutput, JobSpec, CAPTURE_LIMIT};
pub use launch::{confine_self, deny_inspection};
pub use live::{kill_class_under, kill_under, live_under};
pub use outcome::{human_bytes, signal_name, LimitHit, Outcome};
pub use private_tmp::available as private_tmp_available;
pub use spec::{Sandbox, SpawnOptions, WorkerSpec, DEFAULT_LINE_LIMIT, DEFAULT_STDERR_TAIL};
pub use support::{sandbox_support, MemoryLimitMechanism, ProcessLimitMechanism, SandboxSupport};
pub use worker::{kill_worker_group, Worker};
pub use zygote::Zygote;
