//! Turning a `WorkerSpec` into a running, confined process with its reader, waiter and
//! watchdog threads. Everything that can fail here fails before or right after the fork,
//! and leaves nothing running.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver};

use crate::cgroup::WorkerCgroup;
use crate::child_setup::{ChildSetup, Namespaces, SandboxSteps, UserMaps};
use crate::error::SpawnError;
use crate::pipes::{self, StderrTail, StdoutEvent};
use crate::procfs;
use crate::spec::{Sandbox, SpawnOptions, WorkerSpec};
use crate::support::sandbox_support;
use crate::watchdog::{self, RssWatchdog};
use crate::zygote::Zygote;
use crate::{landlock_rules, private_tmp, spawner};

/// Lines waiting to be read: small, so a worker spamming stdout between requests blocks
/// on its pipe instead of filling our memory.
const LINE_QUEUE: usize = 4;

/// A started worker's parts.
pub(crate) struct Launched {
    pub pid: u32,
    pub stdin: File,
    pub lines: Receiver<StdoutEvent>,
    pub exits: Receiver<io::Result<ExitStatus>>,
    /// The most resident memory the leader held (its `ru_maxrss`), set once it is reaped.
    pub leader_peak: Arc<AtomicU64>,
    /// The kernel's OOM kills since boot when the worker started.
    pub oom_kills_at_start: Option<u64>,
    /// The kernel's log from just before the start, where it can be read.
    pub kernel_log: Option<procfs::KernelLog>,
    pub stderr: Arc<StderrTail>,
    pub pipe_inodes: Vec<u64>,
    pub cgroup: Option<WorkerCgroup>,
    pub watchdog: Option<RssWatchdog>,
    /// When the leader started (see `procfs::group_is_ours`).
    pub start_time: Option<u64>,
    /// The network namespace of a sandboxed worker that got one of its own: every process it
    /// starts is in it too (see `procfs::in_net_namespace`).
    pub tag: Option<procfs::NetTag>,
    /// The PID namespace of a sandboxed worker that got one of its own (`pid_namespace.rs`): the
    /// namespace, its init and its runner (the leader is then the keeper outside it).
    pub pid_ns: Option<(procfs::NsTag, procfs::PidNamespace)>,
}

/// The child-side plan and the parent-side resources for one sandboxed spawn.
struct Confinement {
    steps: SandboxSteps,
    cgroup: Option<WorkerCgroup>,
    watchdog_limit: Option<u64>,
}

fn confine(spec: &WorkerSpec) -> Result<Confinement, SpawnError> {
    let support = sandbox_support();
    let sb = &spec.sandbox;
    let cgroup =
        WorkerCgroup::create(&support.cgroups, sb.memory_bytes, sb.max_processes).map_err(|e| {
            SpawnError::Cgroup { label: spec.label.clone(), path: e.path, source: e.source }
        })?;
    let steps = steps(sb, &spec.program, Some(&spec.cwd), &spec.label, cgroup.as_ref(), true)?;
    let watchdog_limit = sb.memory_bytes.filter(|_| support.cgroups.memory.is_none());
    Ok(Confinement { steps, cgroup, watchdog_limit })
}

/// Where CUDA's MPS daemon keeps its pipes, where it exists (`CUDA_MPS_PIPE_DIRECTORY`, else
/// `/tmp/nvidia-mps`).
fn mps_pipe_directory() -> Option<PathBuf> {
    let dir = std::env::var_os("CUDA_MPS_PIPE_DIRECTORY")
        .map_or_else(|| PathBuf::from("/tmp/nvidia-mps"), PathBuf::from);
    dir.is_dir().then_some(dir)
}

/// The confinement steps of `sb` for `program` (started in `cwd`), in `cgroup` if there is one, in a
/// PID namespace of its own where `pid_namespace` asks for one and the kernel allows it (and with
/// it a private `/tmp`).
fn steps(
    sb: &Sandbox,
    program: &Path,
    cwd: Option<&Path>,
    label: &str,
    cgroup: Option<&WorkerCgroup>,
    pid_namespace: bool,
) -> Result<SandboxSteps, SpawnError> {
    let support = sandbox_support();
    // No core dumps of crashing candidates.
    let mut rlimits = vec![(libc::RLIMIT_CORE, 0, 0)];
    if let Some(secs) = sb.cpu_seconds {
        // SIGXCPU at the soft limit says clearly what happened; SIGKILL a second later.
        rlimits.push((libc::RLIMIT_CPU, secs, secs.saturating_add(1)));
    }
    let pids_by_cgroup = cgroup.is_some() && support.cgroups.pids.is_some();
    if let (Some(n), false, false) = (sb.max_processes, pids_by_cgroup, support.root) {
        rlimits.push((libc::RLIMIT_NPROC, n, n));
    }
    let net = !sb.network && support.network_namespace;
    let pid = pid_namespace && support.pid_namespace.is_ok();
    let user =
        (net && support.network_needs_user_namespace) || (pid && support.pid_needs_user_namespace);
    let namespaces = Namespaces { net, pid, user: user.then(UserMaps::ours) };
    let landlock = match support.landlock {
        Some(_) => landlock_rules::build(sb, program).map_err(|e| SpawnError::Landlock {
            label: label.to_owned(),
            detail: e.detail,
            source: e.source,
        })?,
        None => None,
    };
    let private_tmp = if pid {
        let writable = sb.write_paths.iter().map(PathBuf::as_path);
        let mut readable: Vec<&Path> = sb.read_paths.iter().map(PathBuf::as_path).collect();
        readable.extend(cwd);
        readable.push(program);
        let prefixes = landlock_rules::interpreter_prefixes(program);
        readable.extend(prefixes.iter().map(PathBuf::as_path));
        // CUDA's MPS clients reach their daemon through a pipe directory, by default below /tmp
        // (a socket on a read-only mount can still be connected to).
        let mps = mps_pipe_directory();
        readable.extend(mps.as_deref());
        let access = match (&landlock, support.landlock) {
            (Some(_), Some(abi)) => landlock_rules::own_tmp_access(abi),
            _ => 0,
        };
        let plan = private_tmp::plan(writable, readable, sb.memory_bytes, access);
        if plan.is_none() {
            tracing::debug!(worker = label, "/tmp is not a directory of its own: the worker shares the host's (Landlock limits its writes there)");
        }
        plan
    } else {
        tracing::debug!(worker = label, "no mount namespace (no PID namespace): the worker shares the host's /tmp (Landlock limits its writes there)");
        None
    };
    Ok(SandboxSteps {
        cgroup_procs: cgroup.map(|c| c.procs_files().to_vec()).unwrap_or_default(),
        rlimits,
        seccomp: crate::seccomp::namespace_filter(),
        // Root's, or those a new user namespace gives in it: a forked runner never execs, which
        // would clear the latter, and the PID namespace's init never does.
        drop_capabilities: support.root || user,
        own_task_access: match (&landlock, support.landlock) {
            (Some(_), Some(abi)) => landlock_rules::own_task_access(abi),
            _ => 0,
        },
        own_proc_access: match (&landlock, pid) {
            (Some(_), true) => landlock_rules::own_proc_access(sb),
            _ => 0,
        },
        namespaces,
        landlock,
        private_tmp,
    })
}

/// Confines this process as `sandbox` says (network, Landlock, seccomp, rlimits, no
/// capabilities), for `program`, which it is about to exec: for a process that another tool
/// must start, such as a profiler's target. There is no cgroup: `memory_bytes` is not enforced
/// and `max_processes` is `RLIMIT_NPROC` (which root ignores). There is no PID namespace either:
/// this process becomes the program, which the tool that started it follows by its pid.
pub fn confine_self(sandbox: &Sandbox, program: &Path) -> Result<(), SpawnError> {
    let label = "this process";
    let steps = steps(sandbox, program, None, label, None, false)?;
    // SAFETY: the steps only change this process's own limits, namespaces and rights.
    unsafe { steps.apply() }.map_err(|source| SpawnError::Spawn {
        label: label.to_owned(),
        program: program.to_owned(),
        source,
    })
}

/// Makes this process (a trusted one, such as cudal1) not dumpable: no process
/// of its user without `CAP_SYS_PTRACE` may then read its memory or environment (API keys among
/// them) through `/proc/<pid>/mem` or `environ`, or trace it, and it leaves no core dump. What it
/// starts is dumpable again once it execs; the workers it forks that must write their own
/// `/proc/self` (a user namespace's maps) make themselves dumpable first.
///
/// # Errors
/// When the kernel refuses (it never does on Linux).
pub fn deny_inspection() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    crate::child_setup::check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) }.into())
}

fn thread_error(label: &str, pid: u32) -> impl FnOnce(io::Error) -> SpawnError + '_ {
    move |source| {
        // SAFETY: kill has no memory-safety preconditions; the group is ours.
        unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
        SpawnError::Thread { label: label.to_string(), source }
    }
}

/// A started process's parts, whichever way it was started.
struct Started {
    pid: u32,
    stdin: File,
    stdout: File,
    stderr: File,
    exits: Receiver<io::Result<ExitStatus>>,
    leader_peak: Arc<AtomicU64>,
    start_time: Option<u64>,
    tag: Option<procfs::NetTag>,
    pid_ns: Option<(procfs::NsTag, procfs::PidNamespace)>,
}

/// The PID namespace that the sandboxed child `pid` made, where it was to make one (`wanted`):
/// the namespace, held open, its init and its runner.
fn pid_namespace(pid: u32, wanted: bool) -> Option<(procfs::NsTag, procfs::PidNamespace)> {
    if !wanted {
        return None;
    }
    let ns = procfs::pid_namespace_of(pid)?;
    Some((procfs::NsTag::of_kind(ns.runner, "pid")?, ns))
}

/// `program args` in `cwd` with exactly `env`, which between fork and exec starts its own
/// session, dies with this process, loses the descriptors it should not have and applies `steps`
/// ([`ChildSetup`]). Its standard streams are the caller's to set.
pub(crate) fn command(
    program: &Path,
    args: &[OsString],
    cwd: &Path,
    env: &[(OsString, OsString)],
    steps: Option<SandboxSteps>,
) -> Command {
    let setup = ChildSetup { parent_pid: std::process::id() as libc::pid_t, sandbox: steps };
    let mut command = Command::new(program);
    command.args(args).current_dir(cwd).env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    // SAFETY: `apply` only makes async-signal-safe system calls on prepared data.
    unsafe { command.pre_exec(move || setup.apply()) };
    command
}

/// Starts `spec` by fork and exec, from the spawner thread.
fn exec(spec: &WorkerSpec, steps: Option<SandboxSteps>) -> Result<Started, SpawnError> {
    let wants_pid_ns = steps.as_ref().is_some_and(|s| s.namespaces.pid);
    let mut command = command(&spec.program, &spec.args, &spec.cwd, &spec.env, steps);
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = spawner::spawn(command).map_err(|source| SpawnError::Spawn {
        label: spec.label.clone(),
        program: spec.program.clone(),
        source,
    })?;
    let pid = child.id();
    // Read before anything can reap the child: with the pid, it names this process alone.
    let start_time = procfs::stat(pid).and_then(|s| s.start_time);
    // Its runner has exec'd by now: a runner that ended at once has taken the namespace with it,
    // and the worker's end tells the rest.
    let pid_ns = pid_namespace(pid, wants_pid_ns);
    if wants_pid_ns && pid_ns.is_none() {
        tracing::debug!(label = %spec.label, pid, "a sandboxed worker's PID namespace was not found: it has ended");
    }
    // The child is in the namespace it made by now; one that kept ours is no tag. Read from the
    // runner, which is dumpable where the keeper is not.
    let runner = pid_ns.as_ref().map_or(pid, |(_, ns)| ns.runner);
    let tag = if spec.sandbox.enabled { procfs::NetTag::of(runner) } else { None };
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        unreachable!("all three streams were piped");
    };
    let (exit_tx, exits) = bounded(1);
    let leader_peak = Arc::new(AtomicU64::new(0));
    let peak = Arc::clone(&leader_peak);
    let waiter = std::thread::Builder::new().name(format!("cudal1-wait-{pid}")).spawn(move || {
        let _ = exit_tx.send(reap(child, &peak));
    });
    if let Err(e) = waiter {
        // The closure, and with it the Child, is gone: reap by pid.
        let err = thread_error(&spec.label, pid)(e);
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
        return Err(err);
    }
    let file = |fd: OwnedFd| File::from(fd);
    Ok(Started {
        pid,
        stdin: file(stdin.into()),
        stdout: file(stdout.into()),
        stderr: file(stderr.into()),
        exits,
        leader_peak,
        start_time,
        tag,
        pid_ns,
    })
}

/// Starts `spec` as a child of `zygote`, which applies `steps` in it before it runs anything.
fn fork(
    spec: &WorkerSpec,
    steps: Option<SandboxSteps>,
    zygote: &Zygote,
) -> Result<Started, SpawnError> {
    let failed = |detail: String| SpawnError::Zygote { label: spec.label.clone(), detail };
    if zygote.program() != spec.program {
        return Err(failed(format!(
            "it runs `{}`, not `{}`",
            zygote.program().display(),
            spec.program.display()
        )));
    }
    let pipe = || {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| failed(format!("no pipe: {e}")))
    };
    let ((in_r, in_w), (out_r, out_w), (err_r, err_w)) = (pipe()?, pipe()?, pipe()?);
    let forked = zygote
        .fork(&spec.args, &spec.env, &spec.cwd, steps.as_ref(), [&in_r, &out_w, &err_w])
        .map_err(failed)?;
    let pid = forked.pid;
    // The zygote reaps the child only after it has reported it, so for now the pid is the child's.
    let start_time = procfs::stat(pid).and_then(|s| s.start_time);
    // It confined itself before the zygote answered: a sandboxed child has made its namespaces,
    // and its runner is in them.
    let pid_ns = pid_namespace(pid, steps.as_ref().is_some_and(|s| s.namespaces.pid));
    let runner = pid_ns.as_ref().map_or(pid, |(_, ns)| ns.runner);
    let tag = if spec.sandbox.enabled { procfs::NetTag::of(runner) } else { None };
    if let Some(steps) = &steps {
        // The child said it applied the steps; what the kernel shows of them is checked here.
        if let Err(missing) =
            procfs::confinement_shown(pid, pid_ns.as_ref().map(|(_, ns)| *ns), steps, tag.is_some())
        {
            // SAFETY: kill has no memory-safety preconditions; the pid is the unreaped child's.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            return Err(failed(format!("the forked child is not confined: {missing}")));
        }
    }
    Ok(Started {
        pid,
        stdin: File::from(in_w),
        stdout: File::from(out_r),
        stderr: File::from(err_r),
        exits: forked.exits,
        leader_peak: forked.leader_peak,
        start_time,
        tag,
        pid_ns,
    })
}

pub(crate) fn launch(
    spec: &WorkerSpec,
    options: &SpawnOptions,
    zygote: Option<&Zygote>,
) -> Result<Launched, SpawnError> {
    if !spec.program.is_absolute() {
        return Err(SpawnError::InvalidSpec {
            label: spec.label.clone(),
            detail: format!(
                "program `{}` must be an absolute path (the environment has no PATH)",
                spec.program.display()
            ),
        });
    }
    let confinement = if spec.sandbox.enabled { Some(confine(spec)?) } else { None };
    let (steps, cgroup, watchdog_limit) = match confinement {
        Some(c) => (Some(c.steps), c.cgroup, c.watchdog_limit),
        None => (None, None, None),
    };
    // Opened before the start, so that a kill of this worker is in what it reads later.
    let kernel_log = procfs::KernelLog::from_now();
    let Started { pid, stdin, stdout, stderr, exits, leader_peak, start_time, tag, pid_ns } =
        match zygote {
            Some(z) => fork(spec, steps, z)?,
            None => exec(spec, steps)?,
        };
    let label = &spec.label;
    set_nonblocking(&stdin).map_err(thread_error(label, pid))?;
    let pipe_inodes = [procfs::inode_of(stdout.as_fd()), procfs::inode_of(stderr.as_fd())]
        .into_iter()
        .flatten()
        .collect();
    let oom_kills_at_start = procfs::oom_kills_since_boot();
    let (line_tx, lines) = bounded(LINE_QUEUE);
    pipes::spawn_stdout_reader(format!("cudal1-stdout-{pid}"), stdout, options.line_limit, line_tx)
        .map_err(thread_error(label, pid))?;
    let tail = StderrTail::new(options.stderr_tail_bytes);
    pipes::spawn_stderr_reader(format!("cudal1-stderr-{pid}"), stderr, tail.clone())
        .map_err(thread_error(label, pid))?;
    let watchdog = match watchdog_limit {
        Some(limit) => Some(
            RssWatchdog::start(
                format!("cudal1-rss-{pid}"),
                pid as i32,
                start_time,
                keeper_and_init(pid, pid_ns.as_ref()),
                limit,
                watchdog::INTERVAL,
            )
            .map_err(thread_error(label, pid))?,
        ),
        None => None,
    };
    tracing::debug!(label, pid, sandboxed = spec.sandbox.enabled, forked = zygote.is_some(), net_namespace = ?tag.as_ref().map(procfs::NetTag::inode), pid_namespace = ?pid_ns.as_ref().map(|(t, ns)| (t.inode(), ns)), "worker started");
    Ok(Launched {
        pid,
        stdin,
        lines,
        exits,
        leader_peak,
        oom_kills_at_start,
        kernel_log,
        stderr: tail,
        pipe_inodes,
        cgroup,
        watchdog,
        tag,
        pid_ns,
        start_time,
    })
}

/// The processes of a worker that are copies of a trusted process (its keeper and its PID
/// namespace's init: see `pid_namespace.rs`), whose resident memory is mostly that process's.
pub(crate) fn keeper_and_init(
    pid: u32,
    pid_ns: Option<&(procfs::NsTag, procfs::PidNamespace)>,
) -> Vec<u32> {
    pid_ns.map(|(_, ns)| vec![pid, ns.init]).unwrap_or_default()
}

/// Waits for the leader with `wait4`, which also says the most memory it held (`ru_maxrss`):
/// after a kill that is the size it died at, which `/proc` no longer shows.
fn reap(child: Child, peak: &AtomicU64) -> io::Result<ExitStatus> {
    let pid = child.id() as libc::pid_t;
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value of that plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to locals; the pid is our own child's, reaped only here.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            // Linux reports kilobytes.
            peak.store(u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024, Ordering::SeqCst);
            // Dropping the Child closes nothing we still use and does not wait again.
            drop(child);
            return Ok(ExitStatus::from_raw(status));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn set_nonblocking(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, with integer arguments only.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags == -1 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_denies_inspection_is_not_dumpable() {
        // In a child: the test process stays as it was.
        // SAFETY: the child makes two prctl calls and exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => unsafe {
                let before = libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0);
                let denied = deny_inspection().is_ok();
                let after = libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0);
                libc::_exit(if (before, denied, after) == (1, true, 0) { 0 } else { 1 });
            },
            nix::unistd::ForkResult::Parent { child } => {
                assert_eq!(
                    nix::sys::wait::waitpid(child, None).unwrap(),
                    nix::sys::wait::WaitStatus::Exited(child, 0)
                );
            }
        }
    }
}
