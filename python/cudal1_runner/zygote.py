"""A trusted process that imports PyTorch and the runner once, then forks runners on request.

Started by the Rust supervisor (``cudal1_supervisor::Zygote``) as ``python -m cudal1_runner.zygote
--preload cudal1_runner.preload`` with a ``SOCK_SEQPACKET`` socket as its stdin. No task or
candidate code ever runs in this process: it only forks. Each child takes the descriptors sent
with its request as its stdin, stdout and stderr, its environment and working directory, confines
itself exactly as the supervisor's own forked children do before they exec (``confine``), tells
this process whether that worked, and only then runs its command (``-m cudal1_runner --role
ROLE``, as ``python`` would). So a forked runner starts in milliseconds instead of the seconds an
interpreter takes to import torch. A sandboxed child that makes a PID namespace stays outside it as
the runner's keeper (``confine``): the pid reported is the keeper's, and its exit status and peak
memory are the runner's. This process is not dumpable.

Messages are JSON objects, one per packet. From the supervisor:
``{"op": "spawn", "id", "argv", "env", "cwd", "bytecode", "steps"}`` with three descriptors
(stdin, stdout, stderr) and a fourth when ``steps.landlock`` is set. To the supervisor:
``{"op": "ready", "threads"}`` once the imports are done; ``{"op": "spawned", "id", "pid"}``
or ``{"op": "failed", "id", "error"}``; ``{"op": "exited", "pid", "status", "maxrss_kb"}``
(the raw wait status and the child's peak resident set, as ``wait4`` gives them). End of input
ends this process; its children die with it (``PR_SET_PDEATHSIG``). So does a time with no
children and no request (``--idle SECONDS``): the supervisor starts another when it needs one.
"""

import json
import os
import selectors
import signal
import socket
import sys
import time

PROTOCOL = 1
_MAX_PACKET = 1 << 20


def _send(sock, message: dict) -> None:
    sock.send(json.dumps(message).encode())


def _open_fds() -> set:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def _child(request: dict, fds: list, status_w: int, zygote_pid: int) -> None:
    """In the forked child: never returns."""
    from . import confine

    try:
        os.setsid()
        confine.die_with_parent(zygote_pid)
        # This process is not dumpable (``main``); a runner is as dumpable as an interpreter.
        confine.set_dumpable(True)
        for target, fd in zip((0, 1, 2), fds[:3]):
            os.dup2(fd, target)
        landlock = fds[3] if len(fds) > 3 else None
        # Nothing of the zygote's stays open: its socket, other children's pidfds and pipes.
        keep = {0, 1, 2, status_w} | ({landlock} if landlock is not None else set())
        for fd in _open_fds() - keep:
            try:
                os.close(fd)
            except OSError:
                pass
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(dict(request["env"]))
        steps = request.get("steps")
        if steps is not None:
            confine.apply(steps, landlock)
        if landlock is not None:
            os.close(landlock)
    except BaseException as e:  # noqa: BLE001 - anything that went wrong is reported and ends the child
        try:
            os.write(status_w, f"{type(e).__name__}: {e}".encode(errors="replace"))
        finally:
            os._exit(127)
    os.write(status_w, b"ok")
    os.close(status_w)
    try:
        # What the interpreter would have done at start with this environment and arguments.
        sys.dont_write_bytecode = "PYTHONDONTWRITEBYTECODE" in os.environ
        import io
        import runpy
        import tempfile

        tempfile.tempdir = None
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True, write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, write_through=True)
        module, path, rest = _command(request["argv"])
        sys.argv = [module or path] + rest
        if module is not None:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
            runpy.run_path(path, run_name="__main__")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    except SystemExit as e:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(e.code if isinstance(e.code, int) else (0 if e.code is None else 1))
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(1)


def _command(argv):
    """``[-u] (-m MODULE | SCRIPT) ARGS...`` as (module, script, args); ``-u`` is what the
    child's streams do anyway (they write through)."""
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"arguments must be a list of strings, not {argv!r}")
    if argv[:1] == ["-u"]:
        argv = argv[1:]
    if argv[:1] == ["-m"] and len(argv) >= 2:
        return argv[1], None, argv[2:]
    if argv and not argv[0].startswith("-"):
        return None, argv[0], argv[1:]
    raise ValueError(f"a forked interpreter takes [-u] (-m MODULE | SCRIPT) ARGS..., not {argv!r}")


def _spawn(request: dict, fds: list):
    """Forks one runner; returns its pid or raises with the reason it could not start."""
    _command(request.get("argv"))
    if len(fds) < 3:
        raise ValueError(f"a spawn needs three descriptors, got {len(fds)}")
    status_r, status_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(status_r)
        _child(request, fds, status_w, os.getppid())
    os.close(status_w)
    chunks = []
    while True:
        chunk = os.read(status_r, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(status_r)
    said = b"".join(chunks)
    if said != b"ok":
        os.waitpid(pid, 0)
        raise RuntimeError(said.decode(errors="replace") or "the child ended before it was confined")
    return pid


def _nspid(pid: int) -> list:
    """``NSpid`` of ``/proc/PID/status``: the process's pid in each PID namespace it is in."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return line.split()[1:]
    except OSError:
        pass
    return []


def _namespace_children(pid: int) -> list:
    """The children of ``pid`` that live in a PID namespace below its own: a keeper's init and
    runner (``confine``); none for a runner without a namespace of its own."""
    depth = len(_nspid(pid))
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(c) for c in f.read().split())
    except OSError:
        return []
    return [c for c in found if depth and len(_nspid(c)) > depth]


def _kill(pid: int) -> None:
    """SIGKILL to ``pid``'s whole group (each child leads its own session) and to ``pid``."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _end(children: dict) -> None:
    """End of input: the children die with the zygote, and are reaped here first (for up to two
    seconds), so that none is left for init to adopt. Each leads its own session: its whole group
    goes. A keeper is killed last: killed with its namespace, it would leave the namespace's init
    and runner to init before it could reap them; its namespace is killed (the kernel kills all of
    it once its init dies), the keeper reaps it and ends by itself, and is killed after a second
    where it has not."""
    left = set(children.values())
    keepers = set()
    for pid in left:
        inside = _namespace_children(pid)
        for child in inside:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
        if inside:
            keepers.add(pid)
        else:
            _kill(pid)
    start = time.monotonic()
    while left and time.monotonic() < start + 2.0:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                left.discard(pid)
            elif pid in keepers and time.monotonic() >= start + 1.0:
                keepers.discard(pid)
                _kill(pid)
        if left:
            time.sleep(0.01)
    os._exit(0)


def main(argv=None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m cudal1_runner.zygote")
    parser.add_argument("--preload", action="append", default=[], help="a module to import before forking (repeatable)")
    parser.add_argument("--idle", type=float, default=None, help="end after this many seconds without children or requests")
    args = parser.parse_args(argv)
    from . import confine

    # Trusted: no process of its user may read its memory or environment (``/proc/<pid>/mem``,
    # ``environ``) or trace it, as a runner's sandbox without a PID namespace of its own could.
    confine.set_dumpable(False)
    # The control socket moves off fd 0, which reads /dev/null from here on.
    control_fd = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sock = socket.socket(fileno=control_fd)
    # -m put the working directory first on sys.path; a child works elsewhere.
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", cwd)]

    import importlib

    for name in args.preload:
        importlib.import_module(name)
    threads = len(os.listdir("/proc/self/task"))
    _send(sock, {"op": "ready", "protocol": PROTOCOL, "threads": threads})
    if threads != 1:
        # fork() copies one thread: a lock another thread held stays held in every child.
        sys.stderr.write(f"cudal1 zygote: {threads} threads after the imports; forking is unsafe\n")
        os._exit(3)

    children = {}  # pidfd -> pid
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    while True:
        events = selector.select(None if children or args.idle is None else args.idle)
        if not events and not children:
            os._exit(0)
        for key, _ in events:
            if key.fileobj is sock:
                try:
                    data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_PACKET, 8)
                except ConnectionError:
                    data = b""
                if not data:
                    _end(children)
                request = json.loads(data)
                try:
                    pid = _spawn(request, fds)
                except Exception as e:  # noqa: BLE001 - reported to the supervisor
                    _send(sock, {"op": "failed", "id": request.get("id"), "error": str(e)})
                else:
                    pidfd = os.pidfd_open(pid)
                    children[pidfd] = pid
                    selector.register(pidfd, selectors.EVENT_READ)
                    _send(sock, {"op": "spawned", "id": request["id"], "pid": pid})
                finally:
                    for fd in fds:
                        os.close(fd)
            else:
                pidfd = key.fileobj
                pid = children.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status, usage = os.wait4(pid, 0)
                _send(sock, {"op": "exited", "pid": pid, "status": status, "maxrss_kb": usage.ru_maxrss})


if __name__ == "__main__":
    main()
