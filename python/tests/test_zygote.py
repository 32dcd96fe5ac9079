"""The fork server's pure parts in-process: which commands a child may run, and that a
confinement step that cannot be applied raises (so the child ends before it runs anything)."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cudal1_runner import confine
from cudal1_runner.zygote import _command


def test_commands_are_module_or_script_with_arguments():
    assert _command(["-m", "cudal1_runner", "--role", "candidate"]) == ("cudal1_runner", None, ["--role", "candidate"])
    assert _command(["-u", "/x/probe.py", "a"]) == (None, "/x/probe.py", ["a"])
    for bad in [[], ["-m"], ["-c", "print(1)"], ["-X", "dev", "x.py"], "x.py", [1]]:
        with pytest.raises(ValueError):
            _command(bad)


_PYTHONPATH = {"PYTHONPATH": str(Path(confine.__file__).parent.parent)}


def _apply_in_child(steps: dict) -> subprocess.CompletedProcess:
    # In a child: a step that takes would confine this test process for good.
    code = f"from cudal1_runner import confine; confine.apply({steps!r}, None)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_PYTHONPATH)


_NO_NAMESPACES = {"unshare": 0, "pid": False, "uid_map": None, "gid_map": None}


def _steps(**over) -> dict:
    steps = {"cgroup_procs": [], "rlimits": [], "namespaces": _NO_NAMESPACES, "drop_capabilities": False, "landlock": False,
             "own_task_access": 0, "own_proc_access": 0, "seccomp": None,
             "syscalls": {"capset": 126, "landlock_add_rule": 445, "landlock_restrict_self": 446}}
    steps.update(over)
    return steps


_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x20000, 0x10000000, 0x20000000


def _pid_namespace() -> dict:
    """A PID namespace as the supervisor asks for one: as root plainly, else in a user namespace."""
    if os.geteuid() == 0:
        return {"unshare": _CLONE_NEWPID | _CLONE_NEWNS, "pid": True, "uid_map": None, "gid_map": None}
    uid, gid = os.getuid(), os.getgid()
    return {"unshare": _CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS, "pid": True, "uid_map": f"{uid} {uid} 1\n", "gid_map": f"{gid} {gid} 1\n"}


def _runner(body: str, *args) -> subprocess.Popen:
    """A process that confines itself into a PID namespace of its own (no core dumps) and runs
    ``body`` as its runner, with ``target`` (this test's pid) and ``args`` at hand."""
    steps = _steps(namespaces=_pid_namespace(), rlimits=[[4, 0, 0]])
    code = "import os, resource, signal, sys\nfrom cudal1_runner import confine\n"
    code += f"target = {os.getpid()}\nconfine.apply({steps!r}, None)\n" + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_PYTHONPATH)


def _require_pid_namespaces():
    probe = _runner("os._exit(0)")
    _, err = probe.communicate(timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"this machine gives no PID namespace: {err.strip()[-300:]}")


def test_steps_that_cannot_be_applied_raise():
    assert _apply_in_child(_steps()).returncode == 0
    # A soft limit above the hard one is refused by the kernel.
    bad_limit = _apply_in_child(_steps(rlimits=[[4, 10, 5]]))
    assert bad_limit.returncode != 0 and "setrlimit" in bad_limit.stderr
    missing_cgroup = _apply_in_child(_steps(cgroup_procs=["/nonexistent/cgroup.procs"]))
    assert missing_cgroup.returncode != 0 and "No such file" in missing_cgroup.stderr
    no_ruleset = _apply_in_child(_steps(landlock=True))
    assert no_ruleset.returncode != 0 and "Landlock" in no_ruleset.stderr


def test_a_runner_in_a_pid_namespace_reaches_no_outside_process_and_its_keeper_ends_as_it_did():
    import resource

    _require_pid_namespaces()
    nice, cpus = os.getpriority(os.PRIO_PROCESS, 0), os.sched_getaffinity(0)
    fsize = resource.getrlimit(resource.RLIMIT_FSIZE)
    # Each call sets what is: where one works, it changes nothing.
    body = """
        assert (os.getpid(), os.getppid()) == (2, 0), (os.getpid(), os.getppid())
        reached = []
        for name, call in [
            ("prlimit", lambda: resource.prlimit(target, resource.RLIMIT_FSIZE, resource.prlimit(target, resource.RLIMIT_FSIZE))),
            ("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, target, os.getpriority(os.PRIO_PROCESS, target))),
            ("sched_setaffinity", lambda: os.sched_setaffinity(target, os.sched_getaffinity(target))),
            ("kill", lambda: os.kill(target, 0)),
            ("pidfd_open", lambda: os.pidfd_open(target)),
        ]:
            try:
                call()
                reached.append(name)
            except ProcessLookupError:
                pass
        # Only its own processes are its user's that it can see.
        os.setpriority(os.PRIO_USER, os.getuid(), 7)
        print(" ".join(reached) or "nothing", flush=True)
        if sys.argv[1] == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        os._exit(int(sys.argv[1]))
    """
    for how, expected in [("3", 3), ("segv", -signal.SIGSEGV)]:
        runner = _runner(body, how)
        out, err = runner.communicate(timeout=60)
        assert out.strip() == "nothing", err
        assert runner.returncode == expected, err
    assert (resource.getrlimit(resource.RLIMIT_FSIZE), os.getpriority(os.PRIO_PROCESS, 0), os.sched_getaffinity(0)) == (fsize, nice, cpus)


def _namespace_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/pid").st_ino


def _started(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def test_what_a_runner_leaves_in_its_pid_namespace_is_gone_when_its_keeper_ends():
    _require_pid_namespaces()
    body = """
        for setsid in (False, True):
            if os.fork() == 0:
                if setsid:
                    os.setsid()
                if os.fork() == 0:
                    os.closerange(0, 1024)
                    signal.pause()
                os._exit(0)
            os.wait()
        print("ready", flush=True)
        sys.stdin.readline()
    """
    runner = _runner(body)
    assert runner.stdout.readline() == "ready\n", runner.stderr.read()
    with open(f"/proc/{runner.pid}/task/{runner.pid}/children") as f:
        children = [int(c) for c in f.read().split()]
    namespace = _namespace_of(children[0])
    assert namespace != _namespace_of(os.getpid())
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if _namespace_of(int(name)) == namespace:
                    members.append((int(name), _started(int(name))))
            except OSError:
                pass
    # The init, the runner and the two orphans, adopted by the init.
    assert len(members) == 4, members
    runner.stdin.write("\n")
    runner.stdin.flush()
    assert runner.wait(timeout=60) == 0
    left = [(pid, start) for pid, start in members if _started(pid) == start]
    assert left == [], f"outlived their keeper (zombies too): {left}"


def test_the_fork_server_is_not_dumpable():
    # Not dumpable: no process of its user without CAP_SYS_PTRACE may read its memory or
    # environment (/proc/<pid>/mem, environ), whatever its sandbox lets through. As root, both
    # sides drop their capabilities first (a process with fewer capabilities than its target may
    # not read it in any case): then only its being dumpable or not decides, as for any other user.
    drop = "import os, sys\nfrom cudal1_runner import confine\nif os.geteuid() == 0:\n    confine._drop_capabilities(126)\n"
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = {**_PYTHONPATH, "CUDAL1_SECRET": "the evaluator's"}
    start = drop + "os.execv(sys.executable, [sys.executable, '-m', 'cudal1_runner.zygote'])"
    zygote = subprocess.Popen([sys.executable, "-c", start], stdin=theirs, env=env)
    theirs.close()
    try:
        assert json.loads(ours.recv(1 << 20))["op"] == "ready"
        read = drop + textwrap.dedent(f"""
            try:
                open("/proc/{zygote.pid}/environ", "rb").read()
            except PermissionError:
                raise SystemExit(0)
            raise SystemExit("its environment was read")
        """)
        reader = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, env=_PYTHONPATH)
        assert reader.returncode == 0, reader.stderr
    finally:
        ours.close()
        zygote.wait(timeout=30)
