"""The supervisor's confinement steps, applied by a forked runner to itself (``zygote``).

The Rust supervisor builds the steps (``SandboxSteps`` in crates/cudal1-supervisor) and applies
them itself in the children it forks before they exec; a runner forked by the zygote gets the
same steps as JSON and applies them here, in the same order, before any task or candidate code is
loaded: cgroups, rlimits, namespaces (network; PID, with a mount namespace for its ``/proc`` and a
private ``/tmp``),
capabilities, Landlock (a ruleset the supervisor built, passed as a descriptor), seccomp (a program
the supervisor built). Every step either succeeds or raises; the zygote reports a raise and the
child exits before it runs anything. The system call numbers come with the steps, so nothing here
depends on the architecture.

With a PID namespace the process that applies the steps stays outside it as the worker's keeper,
and ``apply`` returns in a new process, the runner (pid 2 there), under an init (pid 1) that only
reaps: the same three processes as the supervisor's own ``pid_namespace.rs``, whose notes say why.
"""

import ctypes
import os
import resource
import signal

_libc = ctypes.CDLL(None, use_errno=True)

# <linux/prctl.h>, <linux/seccomp.h>: the same on every architecture.
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
LANDLOCK_RULE_PATH_BENEATH = 1
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SIGKILL = 9
# <sys/mount.h>
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_RELATIME = 1 << 21
# statvfs's flags of a mount and the mount flags that keep them.
_KEPT_MOUNT_FLAGS = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)
MS_REC = 1 << 14
MS_PRIVATE = 1 << 18
# <sys/wait.h>: wait for every kind of child, those that send no SIGCHLD at their end too.
_WALL = 0x40000000


def _check(ret: int, what: str) -> int:
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _prctl(option: int, *args: int) -> int:
    values = [ctypes.c_ulong(a) for a in args] + [ctypes.c_ulong(0)] * (4 - len(args))
    return _libc.prctl(ctypes.c_int(option), *values)


def set_dumpable(dumpable: bool) -> None:
    """``PR_SET_DUMPABLE``: a process that is not dumpable has no core dump, and no process without
    ``CAP_SYS_PTRACE`` may read its memory or environment through ``/proc/<pid>/mem``, ``environ``
    or ``ptrace``, its own user's included. Trusted processes (the fork server) are not; what they
    fork sets it back (a runner is as dumpable as an interpreter started for it)."""
    _check(_prctl(PR_SET_DUMPABLE, 1 if dumpable else 0), "prctl(PR_SET_DUMPABLE)")


def die_with_parent(parent: int) -> None:
    """SIGKILL when the zygote ends, as the supervisor's children die with it."""
    _check(_prctl(PR_SET_PDEATHSIG, _SIGKILL), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        raise OSError("the zygote ended while this runner started")


class _Rlimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(f"short write to {path}")
    finally:
        os.close(fd)


def _drop_capabilities(capset: int) -> None:
    for cap in range(64):
        if _prctl(PR_CAPBSET_DROP, cap) == -1:
            if ctypes.get_errno() == 22:  # EINVAL: past the last capability this kernel knows
                break
            _check(-1, f"prctl(PR_CAPBSET_DROP, {cap})")
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.syscall(ctypes.c_long(capset), ctypes.byref(header), data), "capset")


def _set_rlimits(steps: dict, which) -> None:
    for kind, soft, hard in steps["rlimits"]:
        if which(kind):
            limit = _Rlimit(soft, hard)
            _check(_libc.setrlimit(ctypes.c_int(kind), ctypes.byref(limit)), f"setrlimit({kind})")


def _mount(source, target, fstype, flags: int, what: str, data=None) -> None:
    encode = lambda v: None if v is None else v.encode()  # noqa: E731
    _check(_libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)), what)


def _restrict(steps: dict, landlock_fd, own_rules: bool) -> None:
    """Landlock, then seccomp; ``own_rules``: with the rules the runner adds for itself."""
    calls = steps["syscalls"]
    if steps["landlock"]:
        if landlock_fd is None:
            raise OSError("the steps name a Landlock ruleset but none was sent")
        own = [("/proc/self/task", steps["own_task_access"]), ("/proc", steps.get("own_proc_access", 0))] if own_rules else []
        tmp = steps.get("private_tmp")
        if own_rules and tmp is not None:
            own.append((tmp["root"], tmp["access"]))
        for path, access in own:
            if not access:
                continue
            beneath = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                attr = _PathBeneath(access, beneath)
                _check(
                    _libc.syscall(ctypes.c_long(calls["landlock_add_rule"]), ctypes.c_int(landlock_fd),
                                  ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(attr), ctypes.c_uint32(0)),
                    f"landlock_add_rule({path})",
                )
            finally:
                os.close(beneath)
        _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(_libc.syscall(ctypes.c_long(calls["landlock_restrict_self"]), ctypes.c_int(landlock_fd), ctypes.c_uint32(0)),
               "landlock_restrict_self")
    program = steps["seccomp"]
    if program is not None:
        _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "prctl(PR_SET_NO_NEW_PRIVS)")
        filters = (_SockFilter * len(program))(*[_SockFilter(*insn) for insn in program])
        fprog = _SockFprog(len(program), filters)
        _check(_libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog),
                           ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(PR_SET_SECCOMP)")


def _mount_private_tmp(tmp: dict) -> None:
    """A ``/tmp`` of this worker's own (``private_tmp.rs``, whose notes say why): a tmpfs over the
    host's, with each kept path of the host's bound back at its own path. Right after the mounts
    were made private."""
    # The host's /tmp as this mount namespace's copy shows it: a bind source must be a mount of the
    # caller's namespace.
    host = os.open(tmp["root"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _mount("tmpfs", tmp["root"], "tmpfs", MS_NOSUID | MS_NODEV, "mounting a private /tmp", tmp["options"])
        for path in tmp["dirs"]:
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                pass
        for kept in tmp["kept"]:
            if not kept["dir"]:
                os.close(os.open(kept["target"], os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
            source = os.open(kept["source"], os.O_PATH | os.O_CLOEXEC, dir_fd=host)
            try:
                # Recursive: a mount below it that this namespace may not separate from it must come along.
                _mount(f"/proc/self/fd/{source}", kept["target"], None, MS_BIND | MS_REC, f"binding {kept['target']}")
            finally:
                os.close(source)
            if not kept.get("writable", False):
                # Landlock's rule on the new /tmp covers what is mounted below it: a path the worker
                # may only read is a read-only mount, with the flags its mount has (a namespace made
                # without privileges may not clear them).
                have = os.statvfs(kept["target"]).f_flag
                flags = MS_REMOUNT | MS_BIND | MS_RDONLY
                for st, ms in _KEPT_MOUNT_FLAGS:
                    if have & st:
                        flags |= ms
                _mount(None, kept["target"], None, flags, f"making {kept['target']} read-only")
    finally:
        os.close(host)


def _set_all_signals(handler) -> None:
    """Every signal's disposition but SIGKILL's, SIGSTOP's and SIGCHLD's."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            continue
        try:
            signal.signal(sig, handler)
        except (OSError, ValueError, RuntimeError):
            pass  # the C library's own signals


def _close_everything() -> None:
    os.closerange(0, os.sysconf("SC_OPEN_MAX"))


def _exit_as(status: int) -> None:
    """Ends this process the way the raw wait ``status`` says a child ended: with its exit code, or
    by its signal (a keeper is not dumpable: a core-dumping signal dumps nothing)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 255)


def _keep(init: int, runner: int) -> None:
    """The keeper: waits for the runner, ends the namespace, ends as the runner ended. Never returns."""
    try:
        _close_everything()
        set_dumpable(False)
        # The supervisor's signals to the group are the runner's to take.
        _set_all_signals(signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        _, status = os.waitpid(runner, 0)
        # The init's end makes the kernel kill the rest of the namespace; it is reaped once all of it is.
        os.kill(init, _SIGKILL)
        os.waitpid(init, 0)
        _exit_as(status)
    finally:
        os._exit(255)


def _init(steps: dict, landlock_fd, ready_w: int) -> None:
    """The namespace's init (pid 1): confines itself, says so, then only reaps. Never returns."""
    try:
        try:
            _check(_prctl(PR_SET_PDEATHSIG, _SIGKILL), "prctl(PR_SET_PDEATHSIG)")
            set_dumpable(False)
            _set_all_signals(signal.SIG_DFL)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            # Mounted by a process inside the namespace: a /proc shows the namespace of its mounter.
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mounting /proc")
            if steps["drop_capabilities"]:
                _drop_capabilities(steps["syscalls"]["capset"])
            _restrict(steps, landlock_fd, own_rules=False)
        except BaseException as e:  # noqa: BLE001 - reported to the keeper
            os.write(ready_w, f"the PID namespace's init: {type(e).__name__}: {e}".encode(errors="replace"))
            os._exit(1)
        # A keeper that died before the init could die with it has closed the other end.
        os.write(ready_w, b"ok")
        _close_everything()
        # Only SIGCHLD, and only to wait for it: every other signal an init gets from its
        # namespace is dropped, since it has no handler; a blocked one would be queued.
        signal.pthread_sigmask(signal.SIG_SETMASK, {signal.SIGCHLD})
        while True:
            try:
                while os.waitpid(-1, os.WNOHANG | _WALL)[0] > 0:
                    pass
            except ChildProcessError:
                pass
            signal.sigwait({signal.SIGCHLD})
    finally:
        os._exit(1)


def _enter_pid_namespace(steps: dict, landlock_fd) -> None:
    """Right after the ``unshare`` that made a PID and a mount namespace: forks the namespace's
    init and the runner, and becomes the keeper. Returns in the runner only, without capabilities
    where the steps drop them; raises (in the keeper) with nothing of the namespace left."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE, "making the mounts private")
    # Before the init and the runner exist: both see it, and the init mounts its /proc after.
    if steps.get("private_tmp") is not None:
        _mount_private_tmp(steps["private_tmp"])
    # No signal may end the keeper before it ignores them; the init and the runner set their own.
    before = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        ready_r, ready_w = os.pipe()
        init = os.fork()
        if init == 0:
            os.close(ready_r)
            _init(steps, landlock_fd, ready_w)
        os.close(ready_w)
        chunks = []
        while chunk := os.read(ready_r, 4096):
            chunks.append(chunk)
        os.close(ready_r)
        said = b"".join(chunks)
        try:
            if said != b"ok":
                raise OSError(said.decode(errors="replace") or "the PID namespace's init ended before it was ready")
            if steps["drop_capabilities"]:
                _drop_capabilities(steps["syscalls"]["capset"])
            runner = os.fork()
        except BaseException:
            os.kill(init, _SIGKILL)
            os.waitpid(init, 0)
            raise
        if runner != 0:
            _keep(init, runner)
        # The runner: dies with the keeper, whose death would make the init its parent.
        _check(_prctl(PR_SET_PDEATHSIG, _SIGKILL), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != 0:
            raise OSError("the keeper ended while this runner started")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def apply(steps: dict, landlock_fd) -> None:
    """Confines this process as ``steps`` says (``SandboxSteps::to_wire`` on the Rust side). With a
    PID namespace, returns in a new process (see the module's notes)."""
    for path in steps["cgroup_procs"]:
        _write(path, b"0")
    namespaces = steps["namespaces"]
    # A limit on processes would stop the keeper's own forks (it counts all of the user's): the
    # runner sets it.
    _set_rlimits(steps, lambda kind: not namespaces["pid"] or kind != resource.RLIMIT_NPROC)
    if namespaces["unshare"]:
        _check(_libc.unshare(ctypes.c_int(namespaces["unshare"])), "unshare")
        if namespaces.get("uid_map") is not None:
            # A process made non-dumpable has a /proc/self owned by root, whose maps it could not write.
            set_dumpable(True)
            _write("/proc/self/setgroups", b"deny")
            _write("/proc/self/uid_map", namespaces["uid_map"].encode())
            _write("/proc/self/gid_map", namespaces["gid_map"].encode())
    if namespaces["pid"]:
        _enter_pid_namespace(steps, landlock_fd)
        _set_rlimits(steps, lambda kind: kind == resource.RLIMIT_NPROC)
    elif steps["drop_capabilities"]:
        _drop_capabilities(steps["syscalls"]["capset"])
    _restrict(steps, landlock_fd, own_rules=True)
