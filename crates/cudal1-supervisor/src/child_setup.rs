//! What the forked child does before exec. Everything here runs between fork and exec in a
//! copy of a multi-threaded process, so it only makes raw system calls on data prepared by
//! the parent: no allocation, no locks, no formatting.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// How the child loses the network.
#[derive(Debug)]
pub(crate) enum NetIsolation {
    /// Keep the network.
    Keep,
    /// `unshare(CLONE_NEWNET)`: needs CAP_SYS_ADMIN.
    Plain,
    /// `unshare(CLONE_NEWUSER | CLONE_NEWNET)` with the current ids mapped to themselves:
    /// works unprivileged where user namespaces are allowed.
    WithUserNamespace { uid_map: Vec<u8>, gid_map: Vec<u8> },
}

impl NetIsolation {
    pub(crate) fn with_user_namespace() -> Self {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        NetIsolation::WithUserNamespace {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }
}

/// The confinement steps, in the order they must run (each later step removes rights an
/// earlier one needs).
#[derive(Debug)]
pub(crate) struct SandboxSteps {
    /// `cgroup.procs` files to write "0" (= this process) to.
    pub cgroup_procs: Vec<CString>,
    pub rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)>,
    pub net: NetIsolation,
    /// Empty the capability sets and the bounding set, so that root's rlimits, cgroup
    /// membership and namespaces cannot be undone from inside.
    pub drop_capabilities: bool,
    /// A Landlock ruleset built by the parent; applied after the capabilities are dropped.
    pub landlock: Option<OwnedFd>,
    /// A seccomp program built by the parent (`seccomp::namespace_filter`); installed last.
    pub seccomp: Option<Vec<libc::sock_filter>>,
    /// Rights on the child's own `/proc/self/task`, added by the child itself (only it
    /// knows its pid). CUDA initialisation fails with error 304 unless it can write there
    /// (thread names through `/proc/self/task/<tid>/comm`); a process can only touch
    /// itself through these files. Zero: no such rule.
    pub own_task_access: u64,
}

#[derive(Debug)]
pub(crate) struct ChildSetup {
    pub parent_pid: libc::pid_t,
    pub sandbox: Option<SandboxSteps>,
}

fn check(ret: libc::c_long) -> io::Result<()> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

const PROC_SETGROUPS: &CStr = c"/proc/self/setgroups";
const PROC_UID_MAP: &CStr = c"/proc/self/uid_map";
const PROC_GID_MAP: &CStr = c"/proc/self/gid_map";

/// open + one write + close.
unsafe fn write_file(path: &CStr, data: &[u8]) -> io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let written = libc::write(fd, data.as_ptr().cast(), data.len());
    let result = if written == data.len() as isize { Ok(()) } else { Err(io::Error::last_os_error()) };
    libc::close(fd);
    result
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
const PROC_SELF_TASK: &CStr = c"/proc/self/task";

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

unsafe fn allow_own_tasks(ruleset: libc::c_int, access: u64) -> io::Result<()> {
    let dir = libc::open(PROC_SELF_TASK.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
    if dir < 0 {
        return Err(io::Error::last_os_error());
    }
    let attr = PathBeneathAttr { allowed_access: access, parent_fd: dir };
    let added = libc::syscall(
        libc::SYS_landlock_add_rule,
        ruleset,
        LANDLOCK_RULE_PATH_BENEATH,
        &raw const attr,
        0u32,
    );
    let result = check(added);
    libc::close(dir);
    result
}

unsafe fn drop_capabilities() -> io::Result<()> {
    for cap in 0..64 {
        if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) == -1 {
            // EINVAL: past the last capability this kernel knows.
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(io::Error::last_os_error());
        }
    }
    // Ambient capabilities appeared in 4.3; EINVAL before that means there are none.
    libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
    check(libc::syscall(libc::SYS_capset, &raw const header, data.as_ptr()))
}

impl SandboxSteps {
    /// The steps as a forked runner applies them to itself (`cudal1_runner.confine`), with the
    /// system call numbers it needs; the Landlock ruleset travels beside it as a descriptor.
    pub(crate) fn to_wire(&self) -> Result<serde_json::Value, String> {
        let cgroup_procs = self
            .cgroup_procs
            .iter()
            .map(|p| p.to_str().map(str::to_owned).map_err(|_| format!("the cgroup path {p:?} is not UTF-8")))
            .collect::<Result<Vec<_>, _>>()?;
        let rlimits: Vec<[u64; 3]> = self.rlimits.iter().map(|&(r, soft, hard)| [u64::from(r), soft, hard]).collect();
        let net = match &self.net {
            NetIsolation::Keep => serde_json::Value::Null,
            NetIsolation::Plain => serde_json::json!({"unshare": libc::CLONE_NEWNET}),
            NetIsolation::WithUserNamespace { uid_map, gid_map } => serde_json::json!({
                "unshare": libc::CLONE_NEWUSER | libc::CLONE_NEWNET,
                "uid_map": String::from_utf8_lossy(uid_map),
                "gid_map": String::from_utf8_lossy(gid_map),
            }),
        };
        let seccomp = self.seccomp.as_ref().map(|program| program.iter().map(|f| [u32::from(f.code), u32::from(f.jt), u32::from(f.jf), f.k]).collect::<Vec<_>>());
        Ok(serde_json::json!({
            "cgroup_procs": cgroup_procs,
            "rlimits": rlimits,
            "net": net,
            "drop_capabilities": self.drop_capabilities,
            "landlock": self.landlock.is_some(),
            "own_task_access": self.own_task_access,
            "seccomp": seccomp,
            "syscalls": {
                "capset": libc::SYS_capset,
                "landlock_add_rule": libc::SYS_landlock_add_rule,
                "landlock_restrict_self": libc::SYS_landlock_restrict_self,
            },
        }))
    }
}

impl ChildSetup {
    /// Runs in the child after fork, before exec.
    ///
    /// # Safety
    /// Only between fork and exec: it changes process-wide state of the calling process.
    pub(crate) unsafe fn apply(&self) -> io::Result<()> {
        // Own session and process group: we signal the group; no controlling terminal.
        check(libc::setsid().into())?;
        // Die with the supervisor. The spawning thread lives as long as the process, so
        // "parent" here means the supervisor process. Re-check in case it already died.
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0).into())?;
        if libc::getppid() != self.parent_pid {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // Descriptors leaked by whoever started the supervisor must not reach the worker.
        // Close-on-exec rather than close: std reports exec failure through one of them.
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);

        match &self.sandbox {
            Some(steps) => steps.apply(),
            None => Ok(()),
        }
    }
}

impl SandboxSteps {
    /// Confines the calling process (and what it executes): between fork and exec, or in a
    /// process about to exec ([`crate::confine_self`]).
    ///
    /// # Safety
    /// It changes process-wide state of the calling process; between fork and exec it only makes
    /// async-signal-safe system calls on prepared data.
    pub(crate) unsafe fn apply(&self) -> io::Result<()> {
        let steps = self;
        for procs in &steps.cgroup_procs {
            write_file(procs, b"0")?;
        }
        for &(resource, soft, hard) in &steps.rlimits {
            let limit = libc::rlimit { rlim_cur: soft, rlim_max: hard };
            check(libc::setrlimit(resource, &limit).into())?;
        }
        match &steps.net {
            NetIsolation::Keep => {}
            NetIsolation::Plain => check(libc::unshare(libc::CLONE_NEWNET).into())?,
            NetIsolation::WithUserNamespace { uid_map, gid_map } => {
                check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET).into())?;
                write_file(PROC_SETGROUPS, b"deny")?;
                write_file(PROC_UID_MAP, uid_map)?;
                write_file(PROC_GID_MAP, gid_map)?;
            }
        }
        if steps.drop_capabilities {
            drop_capabilities()?;
        }
        if let Some(ruleset) = &steps.landlock {
            if steps.own_task_access != 0 {
                allow_own_tasks(ruleset.as_raw_fd(), steps.own_task_access)?;
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
            check(libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32))?;
        }
        if let Some(program) = &steps.seccomp {
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
            let len = u16::try_from(program.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            let fprog = libc::sock_fprog { len, filter: program.as_ptr().cast_mut() };
            check(libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &raw const fprog, 0, 0).into())?;
        }
        Ok(())
    }
}
