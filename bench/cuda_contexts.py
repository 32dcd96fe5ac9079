"""How long CUDA contexts take to make and end when many processes make them at once.

A parent imports torch (no CUDA), then forks N children, C at a time; each makes the device's
context (``torch.empty(1, device="cuda")``), reports how long that took, and exits (ending the
context). Prints one JSON line per concurrency: the wall time for all N, and the mean and largest
time one context took to make. Where contexts are made one at a time by the driver, the wall time
stops falling as C grows.

    python3 bench/cuda_contexts.py [N] [C ...]                  # make and end, C at a time
    python3 bench/cuda_contexts.py --hold N                     # all N at once: making apart from ending
    python3 bench/cuda_contexts.py --hold --env K=V ... N       # the children's CUDA sees K=V
    python3 bench/cuda_contexts.py --hold --matmul N            # and each runs its first matrix product

With --hold every child makes its context and waits until all N have made theirs; the line then
gives the wall time to make all N (from the first fork) and to end them all (from the release to
the last exit), so that the driver's making and ending are seen apart.
"""

import argparse
import json
import os
import time

import torch  # noqa: F401 - imported before the forks, as the fork server does


def make(matmul: bool) -> float:
    t0 = time.perf_counter()
    x = torch.empty(1, device="cuda")
    if matmul:
        a = torch.randn(256, 256, device="cuda")
        x = a @ a
    torch.cuda.synchronize()
    del x
    return time.perf_counter() - t0


def run(n: int, concurrency: int, matmul: bool) -> dict:
    r, w = os.pipe()
    start = time.perf_counter()
    running, started = set(), 0
    while started < n or running:
        while started < n and len(running) < concurrency:
            pid = os.fork()
            if pid == 0:
                os.close(r)
                os.write(w, f"{make(matmul)}\n".encode())
                os._exit(0)
            running.add(pid)
            started += 1
        pid, _ = os.wait()
        running.discard(pid)
    wall = time.perf_counter() - start
    os.close(w)
    times = [float(x) for x in os.read(r, 1 << 20).split()]
    os.close(r)
    return {"n": n, "concurrency": concurrency, "wall_s": round(wall, 3), "per_context_s": round(wall / n, 3),
            "made": len(times), "make_mean_s": round(sum(times) / len(times), 3) if times else None,
            "make_max_s": round(max(times), 3) if times else None}


def hold(n: int, matmul: bool) -> dict:
    made_r, made_w = os.pipe()
    go_r, go_w = os.pipe()
    start = time.perf_counter()
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os.close(made_r)
            os.close(go_w)
            os.write(made_w, f"{make(matmul)}\n".encode())
            os.read(go_r, 1)  # until the parent closes its end
            os._exit(0)
        pids.append(pid)
    os.close(made_w)
    os.close(go_r)
    times, buf = [], b""
    while len(times) < n:
        chunk = os.read(made_r, 1 << 16)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        times += [float(x) for x in lines if x]
    made = time.perf_counter() - start
    released = time.perf_counter()
    os.close(go_w)
    for pid in pids:
        os.waitpid(pid, 0)
    ended = time.perf_counter() - released
    return {"n": n, "hold": True, "matmul": matmul, "env": {k: os.environ[k] for k in sorted(os.environ) if k.startswith(("CUDA_", "PYTORCH_"))},
            "make_all_s": round(made, 3), "end_all_s": round(ended, 3), "per_context_make_s": round(made / n, 3),
            "per_context_end_s": round(ended / n, 3), "make_mean_s": round(sum(times) / len(times), 3) if times else None,
            "make_max_s": round(max(times), 3) if times else None}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--hold", action="store_true")
    p.add_argument("--matmul", action="store_true")
    p.add_argument("--env", action="append", default=[], help="K=V for the children's CUDA (set before any CUDA call)")
    p.add_argument("n", type=int, nargs="?", default=24)
    p.add_argument("concurrency", type=int, nargs="*")
    a = p.parse_args()
    for kv in a.env:
        k, v = kv.split("=", 1)
        os.environ[k] = v
    if a.hold:
        print(json.dumps(hold(a.n, a.matmul)), flush=True)
    else:
        for c in a.concurrency or [1, 2, 4, 6, 8, 12]:
            print(json.dumps(run(a.n, c, a.matmul)), flush=True)
