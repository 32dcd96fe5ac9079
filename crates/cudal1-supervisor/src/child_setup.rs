//! What the forked child does before exec. Everything here runs between fork and exec in a
//! copy of a multi-threaded process, so it only makes raw system calls on data prepared by
//! the parent: no allocation, no locks, no formatting.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// The namespaces a sandboxed worker gets, made by one `unshare` before anything is dropped.
#[derive(Debug, Default)]
pub(crate) struct Namespaces {
    /// A network namespace of its own: no network.
    pub net: bool,
    /// A PID namespace of its own, and a mount namespace for the `/proc` that shows it
    /// ([`crate::pid_namespace`]).
    pub pid: bool,
    /// Both made inside a new user namespace with our own ids mapped to themselves: what a process
    /// without privileges needs. `None`: made as we are (root).
    pub user: Option<UserMaps>,
}

/// The `uid_map` and `gid_map` of a user namespace that maps our own ids to themselves.
#[derive(Debug, Clone)]
pub(crate) struct UserMaps {
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
}

impl UserMaps {
    pub(crate) fn ours() -> Self {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        UserMaps {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }
}

impl Namespaces {
    /// The `unshare` flags (0: none to make).
    pub(crate) fn flags(&self) -> libc::c_int {
        let mut flags = 0;
        if self.net {
            flags |= libc::CLONE_NEWNET;
        }
        if self.pid {
            flags |= libc::CLONE_NEWPID | libc::CLONE_NEWNS;
        }
        if flags != 0 && self.user.is_some() {
            flags |= libc::CLONE_NEWUSER;
        }
        flags
    }
}

/// The confinement steps, in the order they must run (each later step removes rights an
/// earlier one needs).
#[derive(Debug)]
pub(crate) struct SandboxSteps {
    /// `cgroup.procs` files to write "0" (= this process) to.
    pub cgroup_procs: Vec<CString>,
    pub rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)>,
    pub namespaces: Namespaces,
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
    /// Rights on the `/proc` mounted for the child's own PID namespace, added by the child: the
    /// parent's rules name the `/proc` it sees, another mount. Zero: no such rule (reads are not
    /// limited, or there is no PID namespace).
    pub own_proc_access: u64,
    /// A `/tmp` of the worker's own, mounted in its mount namespace ([`crate::private_tmp`]);
    /// only with a PID namespace (which brings the mount namespace). `None`: the host's.
    pub private_tmp: Option<crate::private_tmp::PrivateTmp>,
}

#[derive(Debug)]
pub(crate) struct ChildSetup {
    pub parent_pid: libc::pid_t,
    pub sandbox: Option<SandboxSteps>,
}

pub(crate) fn check(ret: libc::c_long) -> io::Result<()> {
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
    let result =
        if written == data.len() as isize { Ok(()) } else { Err(io::Error::last_os_error()) };
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
const PROC: &CStr = c"/proc";

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Adds a rule to `ruleset` for what is beneath `path`, opened now (by the process that applies it).
unsafe fn allow_beneath(ruleset: libc::c_int, path: &CStr, access: u64) -> io::Result<()> {
    let dir = libc::open(path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
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

pub(crate) unsafe fn drop_capabilities() -> io::Result<()> {
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
            .map(|p| {
                p.to_str()
                    .map(str::to_owned)
                    .map_err(|_| format!("the cgroup path {p:?} is not UTF-8"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rlimits: Vec<[u64; 3]> =
            self.rlimits.iter().map(|&(r, soft, hard)| [u64::from(r), soft, hard]).collect();
        let ns = &self.namespaces;
        let namespaces = serde_json::json!({
            "unshare": ns.flags(),
            "pid": ns.pid,
            "uid_map": ns.user.as_ref().map(|m| String::from_utf8_lossy(&m.uid_map).into_owned()),
            "gid_map": ns.user.as_ref().map(|m| String::from_utf8_lossy(&m.gid_map).into_owned()),
        });
        let seccomp = self.seccomp.as_ref().map(|program| {
            program
                .iter()
                .map(|f| [u32::from(f.code), u32::from(f.jt), u32::from(f.jf), f.k])
                .collect::<Vec<_>>()
        });
        Ok(serde_json::json!({
            "cgroup_procs": cgroup_procs,
            "rlimits": rlimits,
            "namespaces": namespaces,
            "drop_capabilities": self.drop_capabilities,
            "landlock": self.landlock.is_some(),
            "own_task_access": self.own_task_access,
            "own_proc_access": self.own_proc_access,
            "private_tmp": self.private_tmp.as_ref().map(|t| {
                let text = |c: &CString| c.to_string_lossy().into_owned();
                serde_json::json!({
                    "root": text(&t.root),
                    "options": text(&t.options),
                    "dirs": t.dirs.iter().map(text).collect::<Vec<_>>(),
                    "kept": t.kept.iter().map(|k| serde_json::json!({
                        "source": text(&k.source), "target": text(&k.target), "dir": k.dir,
                        "writable": k.writable,
                    })).collect::<Vec<_>>(),
                    "access": t.access,
                })
            }),
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
    /// process about to exec ([`crate::confine_self`]). With a PID namespace the calling process
    /// stays outside as the worker's keeper and this returns only in the runner, a new process
    /// ([`crate::pid_namespace`]).
    ///
    /// # Safety
    /// It changes process-wide state of the calling process; between fork and exec it only makes
    /// async-signal-safe system calls on prepared data.
    pub(crate) unsafe fn apply(&self) -> io::Result<()> {
        for procs in &self.cgroup_procs {
            write_file(procs, b"0")?;
        }
        // A limit on processes would stop the keeper's own forks (it counts all of the user's): the
        // runner sets it.
        self.set_rlimits(|resource| !self.namespaces.pid || resource != libc::RLIMIT_NPROC)?;
        let flags = self.namespaces.flags();
        if flags != 0 {
            check(libc::unshare(flags).into())?;
        }
        if let (true, Some(maps)) = (flags != 0, &self.namespaces.user) {
            // A process made non-dumpable has a /proc/self owned by root, whose maps it could not write.
            check(libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0).into())?;
            write_file(PROC_SETGROUPS, b"deny")?;
            write_file(PROC_UID_MAP, &maps.uid_map)?;
            write_file(PROC_GID_MAP, &maps.gid_map)?;
        }
        if self.namespaces.pid {
            // Returns in the runner only, which the keeper made without capabilities.
            crate::pid_namespace::enter(self)?;
            self.set_rlimits(|resource| resource == libc::RLIMIT_NPROC)?;
        } else if self.drop_capabilities {
            drop_capabilities()?;
        }
        self.restrict(true)
    }

    /// The rlimits of the steps that `which` picks.
    ///
    /// # Safety
    /// As [`SandboxSteps::apply`].
    unsafe fn set_rlimits(
        &self,
        which: impl Fn(libc::__rlimit_resource_t) -> bool,
    ) -> io::Result<()> {
        for &(resource, soft, hard) in self.rlimits.iter().filter(|(r, _, _)| which(*r)) {
            let limit = libc::rlimit { rlim_cur: soft, rlim_max: hard };
            check(libc::setrlimit(resource, &limit).into())?;
        }
        Ok(())
    }

    /// Landlock, then seccomp; `own_rules`: with the rules the calling process adds for itself
    /// (the runner's, not the PID namespace's init's).
    ///
    /// # Safety
    /// As [`SandboxSteps::apply`].
    pub(crate) unsafe fn restrict(&self, own_rules: bool) -> io::Result<()> {
        if let Some(ruleset) = &self.landlock {
            if own_rules && self.own_task_access != 0 {
                allow_beneath(ruleset.as_raw_fd(), PROC_SELF_TASK, self.own_task_access)?;
            }
            if own_rules && self.own_proc_access != 0 {
                allow_beneath(ruleset.as_raw_fd(), PROC, self.own_proc_access)?;
            }
            if let (true, Some(tmp)) = (own_rules, &self.private_tmp) {
                if tmp.access != 0 {
                    allow_beneath(ruleset.as_raw_fd(), &tmp.root, tmp.access)?;
                }
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
            check(libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32))?;
        }
        if let Some(program) = &self.seccomp {
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
            let len = u16::try_from(program.len())
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            let fprog = libc::sock_fprog { len, filter: program.as_ptr().cast_mut() };
            check(
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &raw const fprog,
                    0,
                    0,
                )
                .into(),
            )?;
        }
        Ok(())
    }
}
