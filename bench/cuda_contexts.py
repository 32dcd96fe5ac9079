"""How long CUDA contexts take to make and end when many processes make them at once.

A parent imports torch (no CUDA), then forks N children, C at a time; each makes the device's
context (``torch.empty(1, device="cuda")``), reports how long that took, and exits (ending the
context). Prints one JSON line per concurrency: the wall time for all N, and the mean and largest
time one context took to make. Where contexts are made one at a time by the driver, the wall time
stops falling as C grows. Usage: python3 bench/cuda_contexts.py [N] [C ...]
"""

import json
import os
import sys
import time

import torch  # noqa: F401 - imported before the forks, as the fork server does


def child(w: int) -> None:
    t0 = time.perf_counter()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    os.write(w, f"{time.perf_counter() - t0}\n".encode())
    os._exit(0)


def run(n: int, concurrency: int) -> dict:
    r, w = os.pipe()
    start = time.perf_counter()
    running, started = set(), 0
    while started < n or running:
        while started < n and len(running) < concurrency:
            pid = os.fork()
            if pid == 0:
                os.close(r)
                child(w)
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


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    for c in [int(x) for x in sys.argv[2:]] or [1, 2, 4, 6, 8, 12]:
        print(json.dumps(run(n, c)), flush=True)
