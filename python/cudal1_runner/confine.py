"""The supervisor's confinement steps, applied by a forked runner to itself (``zygote``).

The Rust supervisor builds the steps (``SandboxSteps`` in crates/cudal1-supervisor) and applies
them itself in the children it forks before they exec; a runner forked by the zygote gets the
same steps as JSON and applies them here, in the same order, before any task or candidate code is
loaded: cgroups, rlimits, a network namespace, capabilities, Landlock (a ruleset the supervisor
built, passed as a descriptor), seccomp (a program the supervisor built). Every step either
succeeds or raises; the zygote reports a raise and the child exits before it runs anything. The
system call numbers come with the steps, so nothing here depends on the architecture.
"""

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)

# <linux/prctl.h>, <linux/seccomp.h>: the same on every architecture.
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
LANDLOCK_RULE_PATH_BENEATH = 1
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SIGKILL = 9


def _check(ret: int, what: str) -> int:
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _prctl(option: int, *args: int) -> int:
    values = [ctypes.c_ulong(a) for a in args] + [ctypes.c_ulong(0)] * (4 - len(args))
    return _libc.prctl(ctypes.c_int(option), *values)


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


def apply(steps: dict, landlock_fd) -> None:
    """Confines this process as ``steps`` says (``SandboxSteps::to_wire`` on the Rust side)."""
    calls = steps["syscalls"]
    for path in steps["cgroup_procs"]:
        _write(path, b"0")
    for resource, soft, hard in steps["rlimits"]:
        limit = _Rlimit(soft, hard)
        _check(_libc.setrlimit(ctypes.c_int(resource), ctypes.byref(limit)), f"setrlimit({resource})")
    net = steps["net"]
    if net is not None:
        _check(_libc.unshare(ctypes.c_int(net["unshare"])), "unshare")
        if net.get("uid_map") is not None:
            _write("/proc/self/setgroups", b"deny")
            _write("/proc/self/uid_map", net["uid_map"].encode())
            _write("/proc/self/gid_map", net["gid_map"].encode())
    if steps["drop_capabilities"]:
        _drop_capabilities(calls["capset"])
    if steps["landlock"]:
        if landlock_fd is None:
            raise OSError("the steps name a Landlock ruleset but none was sent")
        if steps["own_task_access"]:
            task = os.open("/proc/self/task", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                attr = _PathBeneath(steps["own_task_access"], task)
                _check(
                    _libc.syscall(ctypes.c_long(calls["landlock_add_rule"]), ctypes.c_int(landlock_fd),
                                  ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(attr), ctypes.c_uint32(0)),
                    "landlock_add_rule",
                )
            finally:
                os.close(task)
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
