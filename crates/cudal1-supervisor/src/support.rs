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
    match s.landlock {
        None => tracing::warn!("Landlock is unavailable: sandboxed workers can read and write anywhere the user can"),
        Some(abi) if abi < 6 => tracing::warn!(abi, "Landlock ABI < 6: no signal scoping, and older ABIs lack TCP and ioctl rules"),
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
        libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, LANDLOCK_CREATE_RULESET_VERSION)
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
    let crate::child_setup::NetIsolation::WithUserNamespace { uid_map, gid_map } =
        crate::child_setup::NetIsolation::with_user_namespace()
    else {
        unreachable!("with_user_namespace builds that variant");
    };
    // SAFETY: the child only makes raw system calls on data prepared here, then _exits.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => unsafe {
            if libc::unshare(libc::CLONE_NEWNET) == 0 {
                libc::_exit(0);
            }
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) == 0 {
                let ok = write_raw(c"/proc/self/setgroups", b"deny")
                    && write_raw(c"/proc/self/uid_map", &uid_map)
                    && write_raw(c"/proc/self/gid_map", &gid_map);
                libc::_exit(if ok { 1 } else { 2 });
            }
            libc::_exit(2)
        },
        Ok(nix::unistd::ForkResult::Parent { child }) => match nix::sys::wait::waitpid(child, None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => NetProbe::Plain,
            Ok(nix::sys::wait::WaitStatus::Exited(_, 1)) => NetProbe::WithUser,
            _ => NetProbe::No,
        },
        Err(_) => NetProbe::No,
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
            assert_eq!(a.landlock.is_some(), lsm.split(',').any(|l| l.trim() == "landlock"), "{lsm}");
        }
        if a.cgroup {
            assert!(a.cgroups.memory.is_some() || a.cgroups.pids.is_some());
        }
    }
}
