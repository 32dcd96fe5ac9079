//! What this machine's kernel lets us use, probed once per process. Each missing mechanism
//! is logged once; sandboxing goes on with the rest.

use std::sync::OnceLock;

use crate::cgroup::{self, CgroupBase, CgroupVersion};

/// How the memory limit is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryLimitMechanism {
    Cgroup(CgroupVersion),
    /// A thread that sums the RSS of the process group and kills it when over.
    RssWatchdog,
}

/// How the process limit is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessLimitMechanism {
    Cgroup(CgroupVersion),
    /// Per real user, counting all of that user's processes.
    RlimitNproc,
    /// Nothing: root ignores `RLIMIT_NPROC` and no pids cgroup could be made.
    Unenforced,
}

/// The result of probing the kernel once.
#[derive(Debug, Clone)]
pub struct SandboxSupport {
    /// A worker can be put into a new network namespace.
    pub network_namespace: bool,
    /// That needs a user namespace too (we are not privileged).
    pub network_needs_user_namespace: bool,
    /// A worker can be put into a PID namespace of its own, with a `/proc` of its own (see
    /// `pid_namespace.rs`); else why not: then it can reach this user's processes by pid
    /// (`prlimit`, `setpriority`, `sched_setaffinity`), and its orphans leave its process tree.
    pub pid_namespace: Result<(), String>,
    /// That needs a user namespace too (we are not privileged).
    pub pid_needs_user_namespace: bool,
    /// The Landlock ABI version, if Landlock is enabled.
    pub landlock: Option<i32>,
    /// Some limit is enforced through a cgroup.
    pub cgroup: bool,
    pub memory_limit: MemoryLimitMechanism,
    pub process_limit: ProcessLimitMechanism,
    /// Running as root: capabilities are dropped in sandboxed workers.
    pub root: bool,
    pub(crate) cgroups: CgroupBase,
}

static SUPPORT: OnceLock<SandboxSupport> = OnceLock::new();

/// Probes once (the first call may take a few milliseconds: it forks).
pub fn sandbox_support() -> &'static SandboxSupport {
    SUPPORT.get_or_init(|| {
        let support = probe();
        report(&support);
        support
    })
}

fn probe() -> SandboxSupport {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let (network_namespace, network_needs_user_namespace) = match probe_netns() {
        NetProbe::Plain => (true, false),
        NetProbe::WithUser => (true, true),
        NetProbe::No => (false, false),
    };
    let (pid_namespace, pid_needs_user_namespace) = match probe_pidns(false) {
        Ok(()) => (Ok(()), false),
        Err(_) if !root && probe_pidns(true).is_ok() => (Ok(()), true),
        Err(why) => (Err(why), false),
    };
    let (cgroups, notes) = cgroup::probe();
    for note in notes {
        tracing::debug!(%note, "cgroup probe");
    }
    let memory_limit = match &cgroups.memory {
        Some(place) => MemoryLimitMechanism::Cgroup(place.version),
        None => MemoryLimitMechanism::RssWatchdog,
    };
    let process_limit = match &cgroups.pids {
        Some(place) => ProcessLimitMechanism::Cgroup(place.version),
        None if root => ProcessLimitMechanism::Unenforced,
        None => ProcessLimitMechanism::RlimitNproc,
    };
    SandboxSupport {
        network_namespace,
        network_needs_user_namespace,
        pid_namespace,
        pid_needs_user_namespace,
        landlock: landlock_abi(),
        cgroup: cgroups.memory.is_some() || cgroups.pids.is_some(),
        memory_limit,
        process_limit,
        root,
        cgroups,
    }
}

fn report(s: &SandboxSupport) {
    if !s.network_namespace {
        tracing::warn!("network namespaces are unavailable: sandboxed workers keep the network (Landlock still denies TCP where ABI >= 4)");
    }
    if let Err(why) = &s.pid_namespace {
        tracing::warn!(reason = %why, "PID namespaces are unavailable: sandboxed workers can reach this user's processes by pid (prlimit, setpriority, sched_setaffinity), and their orphans leave their process tree (found by network namespace only)");
    }
    match s.landlock {
        None => tracing::warn!(
            "Landlock is unavailable: sandboxed workers can read and write anywhere the user can"
        ),
        Some(abi) if abi < 6 => tracing::warn!(
            abi,
            "Landlock ABI < 6: no signal scoping, and older ABIs lack TCP and ioctl rules"
        ),
        Some(_) => {}
    }
    if s.memory_limit == MemoryLimitMechanism::RssWatchdog {
        tracing::warn!("no memory cgroup can be made: memory limits fall back to an RSS watchdog over the process group");
    }
    match s.process_limit {
        ProcessLimitMechanism::Unenforced => {
            tracing::warn!("no pids cgroup can be made and root ignores RLIMIT_NPROC: process limits are not enforced");
        }
        ProcessLimitMechanism::RlimitNproc => {
            tracing::warn!("no pids cgroup can be made: process limits fall back to RLIMIT_NPROC, which counts all of the user's processes");
        }
        ProcessLimitMechanism::Cgroup(_) => {}
    }
    tracing::debug!(support = ?s, "sandbox support probed");
}

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

fn landlock_abi() -> Option<i32> {
    // SAFETY: with a null attribute and the VERSION flag the call only returns a number.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (abi > 0).then(|| i32::try_from(abi).unwrap_or(i32::MAX))
}

enum NetProbe {
    Plain,
    WithUser,
    No,
}

/// Forks a child that tries each way of getting a new network namespace.
fn probe_netns() -> NetProbe {
    let crate::child_setup::UserMaps { uid_map, gid_map } = crate::child_setup::UserMaps::ours();
    // SAFETY: the child only makes raw system calls on data prepared here, then _exits.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => unsafe {
            if libc::unshare(libc::CLONE_NEWNET) == 0 {
                libc::_exit(0);
            }
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) == 0 {
                // A non-dumpable process (cudal1 makes itself one) could not write its own maps.
                libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
                let ok = write_raw(c"/proc/self/setgroups", b"deny")
                    && write_raw(c"/proc/self/uid_map", &uid_map)
                    && write_raw(c"/proc/self/gid_map", &gid_map);
                libc::_exit(if ok { 1 } else { 2 });
            }
            libc::_exit(2)
        },
        Ok(nix::unistd::ForkResult::Parent { child }) => match nix::sys::wait::waitpid(child, None)
        {
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => NetProbe::Plain,
            Ok(nix::sys::wait::WaitStatus::Exited(_, 1)) => NetProbe::WithUser,
            _ => NetProbe::No,
        },
        Err(_) => NetProbe::No,
    }
}

/// The steps of [`probe_pidns`], by the number its child reports.
const PIDNS_STEPS: [&str; 5] = [
    "unshare(CLONE_NEWPID | CLONE_NEWNS)",
    "writing the user namespace's uid and gid maps",
    "making the mounts private",
    "forking into the new PID namespace",
    "mounting a /proc for it",
];

/// Forks a child that makes a PID and a mount namespace (inside a user namespace with `user`),
/// forks its init and mounts a `/proc` there, as a sandboxed worker's keeper does. `Err`: which
/// step the kernel refused, and why.
fn probe_pidns(user: bool) -> Result<(), String> {
    let crate::child_setup::UserMaps { uid_map, gid_map } = crate::child_setup::UserMaps::ours();
    let (report_r, report_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("no pipe: {e}"))?;
    let report_r = std::fs::File::from(report_r);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&report_w);
    // SAFETY: the child only makes raw system calls on data prepared here, then _exits.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => unsafe {
            let fail = |step: i32, errno: i32| -> ! {
                let report = [step.to_ne_bytes(), errno.to_ne_bytes()];
                libc::write(fd, report.as_ptr().cast(), 8);
                libc::_exit(1)
            };
            let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            let flags =
                libc::CLONE_NEWPID | libc::CLONE_NEWNS | if user { libc::CLONE_NEWUSER } else { 0 };
            if libc::unshare(flags) != 0 {
                fail(0, errno());
            }
            if user {
                libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
                if !(write_raw(c"/proc/self/setgroups", b"deny")
                    && write_raw(c"/proc/self/uid_map", &uid_map)
                    && write_raw(c"/proc/self/gid_map", &gid_map))
                {
                    fail(1, errno());
                }
            }
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                fail(2, errno());
            }
            match libc::syscall(libc::SYS_clone, libc::c_long::from(libc::SIGCHLD), 0, 0, 0, 0) {
                -1 => fail(3, errno()),
                0 => {
                    let mounted = libc::mount(
                        c"proc".as_ptr(),
                        c"/proc".as_ptr(),
                        c"proc".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        std::ptr::null(),
                    );
                    libc::_exit(if mounted == 0 { 0 } else { errno() });
                }
                init => {
                    let mut status = 0;
                    libc::waitpid(init as libc::pid_t, &mut status, 0);
                    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
                        (true, 0) => libc::_exit(0),
                        (true, errno) => fail(4, errno),
                        _ => fail(4, libc::EIO),
                    }
                }
            }
        },
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            drop(report_w);
            let status = nix::sys::wait::waitpid(child, None);
            let mut report = [0u8; 8];
            let said = std::io::Read::read(&mut &report_r, &mut report).unwrap_or(0);
            match (status, said) {
                (Ok(nix::sys::wait::WaitStatus::Exited(_, 0)), _) => Ok(()),
                (_, 8) => {
                    let step = i32::from_ne_bytes(report[..4].try_into().expect("four bytes"));
                    let errno = i32::from_ne_bytes(report[4..].try_into().expect("four bytes"));
                    let what = usize::try_from(step)
                        .ok()
                        .and_then(|s| PIDNS_STEPS.get(s))
                        .unwrap_or(&"an unknown step");
                    let user = if user { " (in a user namespace)" } else { "" };
                    Err(format!(
                        "{what}{user} failed: {}",
                        std::io::Error::from_raw_os_error(errno)
                    ))
                }
                (status, _) => Err(format!("the probe ended without a report ({status:?})")),
            }
        }
        Err(e) => Err(format!("cannot fork a probe: {e}")),
    }
}

unsafe fn write_raw(path: &std::ffi::CStr, data: &[u8]) -> bool {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
    if fd < 0 {
        return false;
    }
    let ok = libc::write(fd, data.as_ptr().cast(), data.len()) == data.len() as isize;
    libc::close(fd);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probing_twice_gives_the_same_answer_and_matches_the_kernel() {
        let a = sandbox_support();
        let b = sandbox_support();
        assert!(std::ptr::eq(a, b));
        // Landlock's presence is also visible in the LSM list when securityfs is mounted.
        if let Ok(lsm) = std::fs::read_to_string("/sys/kernel/security/lsm") {
            assert_eq!(
                a.landlock.is_some(),
                lsm.split(',').any(|l| l.trim() == "landlock"),
                "{lsm}"
            );
        }
        if a.cgroup {
            assert!(a.cgroups.memory.is_some() || a.cgroups.pids.is_some());
        }
    }
}
