#!/usr/bin/env python3
"""Load on a running `cudal1 serve`: N clients for a bounded time, each sending reward requests
for scripted candidates of the CPU suite (tests/suite-cpu/candidates, made into P distinct
programs by a comment) and asking again while an item is pending. Prints one JSON object:
requests sent, answered, errors, latency p50/p99 (ms, per request until its final answer),
throughput, and the job ids seen (so that a caller can check the store: one job per program).

  python3 bench/serve_load.py --url http://127.0.0.1:8377 --clients 16 --duration 60 --programs 40

Standard library only; the token comes from $CUDAL1_SERVE_TOKEN.
"""

import argparse
import json
import os
import random
import threading
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (task, candidate file): correct ones and ones with each kind of wrong verdict.
SCRIPT = [
    ("level1/2_Swish", "correct"), ("level1/2_Swish", "nan_output"), ("level1/2_Swish", "raises_in_forward"),
    ("level1/3_Softmax_Rows", "correct"), ("level1/1_Diagonal_Matmul", "wrong_axis"), ("level1/5_Small_Matmul", "correct"),
    ("level1/2_Swish", "missing_modelnew"),
]


def programs(n):
    out = []
    for i in range(n):
        task, name = SCRIPT[i % len(SCRIPT)]
        path = os.path.join(REPO, "tests", "suite-cpu", "candidates", *task.split("/"), name + ".py")
        with open(path) as f:
            code = f.read()
        out.append((task, f"Variant {i}:\n```python\n# load-test program {i}\n{code}\n```\n"))
    return out


def percentile(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("CUDAL1_URL", "http://127.0.0.1:8377"))
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--duration", type=float, default=15.0, help="seconds during which new requests start")
    ap.add_argument("--programs", type=int, default=12, help="distinct programs (requests repeat them)")
    ap.add_argument("--items", type=int, default=1, help="items per request")
    ap.add_argument("--mode", default="correctness")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    token = os.environ.get("CUDAL1_SERVE_TOKEN")
    progs = programs(a.programs)
    lock = threading.Lock()
    stats = {"requests": 0, "answered": 0, "errors": 0, "retries": 0, "latencies": [], "jobs": {}, "verdicts": {}, "error_samples": []}
    stop_at = time.monotonic() + a.duration

    def post(body):
        req = urllib.request.Request(a.url.rstrip("/") + "/v1/reward", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())

    def client(k):
        rng = random.Random(a.seed * 1000 + k)
        while time.monotonic() < stop_at:
            chosen = [progs[rng.randrange(len(progs))] for _ in range(a.items)]
            body = {"items": [{"task": t, "completion": c} for t, c in chosen], "mode": a.mode, "wait_s": 120}
            started = time.monotonic()
            with lock:
                stats["requests"] += 1
            try:
                while True:
                    v = post(body)
                    if v["pending"] == 0:
                        break
                    with lock:
                        stats["retries"] += 1
                took = time.monotonic() - started
                with lock:
                    stats["answered"] += 1
                    stats["latencies"].append(took)
                    for (task, code), r in zip(chosen, v["results"]):
                        if r["job"] is not None:
                            stats["jobs"].setdefault(code, set()).add(r["job"])
                        key = r["verdict"] or r["state"]
                        stats["verdicts"][key] = stats["verdicts"].get(key, 0) + 1
            except (OSError, ValueError, KeyError) as e:
                with lock:
                    stats["errors"] += 1
                    if len(stats["error_samples"]) < 5:
                        stats["error_samples"].append(repr(e))

    began = time.monotonic()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - began
    lat = stats["latencies"]
    jobs = stats["jobs"]
    print(json.dumps({
        "clients": a.clients, "duration_s": round(elapsed, 3), "requests": stats["requests"], "answered": stats["answered"],
        "errors": stats["errors"], "error_samples": stats["error_samples"], "re_asked": stats["retries"],
        "p50_ms": None if not lat else round(percentile(lat, 0.5) * 1e3, 1),
        "p99_ms": None if not lat else round(percentile(lat, 0.99) * 1e3, 1),
        "requests_per_s": round(stats["answered"] / elapsed, 2) if elapsed else None,
        "programs_sent": len(jobs), "jobs": sorted({j for s in jobs.values() for j in s}),
        "programs_with_several_jobs": sum(1 for s in jobs.values() if len(s) > 1),
        "verdicts": stats["verdicts"],
    }))


if __name__ == "__main__":
    main()
