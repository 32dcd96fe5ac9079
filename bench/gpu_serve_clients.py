#!/usr/bin/env python3
"""The clients of bench/gpu_serve.sh: a verl-shaped one (cudal1_rl.verl.compute_score_async,
awaited for many items at once as verl's reward loop does) and a TRL-shaped one
(cudal1_rl.trl reward function, called per batch as GRPOTrainer does), over the bundled
solutions (solutions/) of the bundled tasks (tasks/). Prints and writes one JSON object.

  python3 bench/gpu_serve_clients.py --url URL --out FILE [--filter REGEX] [--part verl,trl|queue]
      [--seconds S]

With --seconds, the verl client gives its items a deadline of 55% of S and the TRL client the rest
(the adapters' own `deadline_s`, as an RL engine would set it): items still pending then are
unscored, and the summary counts what was answered, so that a slow machine still gives numbers.
"""

import argparse
import asyncio
import json
import os
import re
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

from cudal1_rl import trl as trl_adapter  # noqa: E402
from cudal1_rl import verl as verl_adapter  # noqa: E402
from cudal1_rl.client import Client  # noqa: E402


def solutions(pattern):
    out = []
    root = os.path.join(REPO, "solutions")
    for level in sorted(os.listdir(root)):
        if not os.path.isdir(os.path.join(root, level)):
            continue
        for stem in sorted(os.listdir(os.path.join(root, level))):
            task = f"{level}/{stem}"
            if pattern and not re.search(pattern, task):
                continue
            for f in sorted(os.listdir(os.path.join(root, level, stem))):
                if f.endswith(".py"):
                    with open(os.path.join(root, level, stem, f)) as fh:
                        code = fh.read()
                    expect = code.splitlines()[0] if code else ""
                    out.append({"task": task, "variant": f[:-3], "expect": expect,
                                "completion": f"Here is my version.\n\n```python\n{code}\n```\n"})
    return out


def pct(xs, q):
    xs = sorted(xs)
    return None if not xs else round(xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] * 1e3, 1)


def summary(name, latencies, elapsed, rewards, rows, answered=None):
    answered = len(rows) if answered is None else answered
    verdict_ok = sum(1 for r, row in zip(rewards, rows) if r is not None and (("expect=correct" in row["expect"]) == (r > 0)))
    return {"client": name, "items": len(rows), "answered": answered, "elapsed_s": round(elapsed, 2),
            "items_per_s": round(answered / elapsed, 3) if elapsed else None,
            "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99),
            "scored": sum(r is not None for r in rewards), "matching_expectation": verdict_ok,
            "rewards": [{"task": row["task"], "variant": row["variant"], "reward": r} for r, row in zip(rewards, rows)]}


async def verl_client(rows, concurrency, seconds=None):
    sem = asyncio.Semaphore(concurrency)
    latencies = []
    # The adapters' own deadline (what an RL engine sets): an item still pending by then is
    # unscored, and the call returns.
    deadline = None if seconds is None else time.monotonic() + seconds

    async def one(row):
        async with sem:
            t = time.monotonic()
            extra = {} if deadline is None else {"deadline_s": max(1.0, deadline - t)}
            r = await verl_adapter.compute_score_async(data_source="cudal1", solution_str=row["completion"],
                                                       ground_truth=row["task"], extra_info={}, unscored=float("nan"), **extra)
            latencies.append(time.monotonic() - t)
            return None if r["scored"] == 0 else r["score"]

    t0 = time.monotonic()
    rewards = await asyncio.gather(*[one(r) for r in rows])
    answered = sum(r is not None for r in rewards)
    return summary("verl compute_score_async", latencies, time.monotonic() - t0, rewards, rows, answered=answered)


def trl_client(rows, batch, seconds=None):
    latencies, rewards = [], []
    t0 = time.monotonic()
    for i in range(0, len(rows), batch):
        left = None if seconds is None else seconds - (time.monotonic() - t0)
        if left is not None and left < 1.0:
            rewards += [None] * (len(rows) - i)
            break
        f = trl_adapter.make_reward_func(**({} if left is None else {"deadline_s": left}))
        part = rows[i:i + batch]
        t = time.monotonic()
        rewards += f(prompts=[[{"role": "user", "content": "make it faster"}]] * len(part),
                     completions=[[{"role": "assistant", "content": r["completion"]}] for r in part],
                     task=[r["task"] for r in part])
        latencies.append(time.monotonic() - t)
    answered = sum(r is not None for r in rewards)
    return summary("trl reward function (per batch)", latencies, time.monotonic() - t0, rewards, rows, answered=answered)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--filter", default=os.environ.get("TASK_FILTER", ""))
    ap.add_argument("--part", default="verl,trl")
    ap.add_argument("--mode", default=None)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=None)
    a = ap.parse_args()
    os.environ["CUDAL1_URL"] = a.url
    rows = solutions(a.filter)
    report = {"solutions": len(rows)}
    if a.part == "queue":
        # Every solution once, through the plain client, for the two-worker check.
        t0 = time.monotonic()
        results = Client(url=a.url).rewards([{"task": r["task"], "completion": r["completion"]} for r in rows], mode=a.mode)
        report.update(elapsed_s=round(time.monotonic() - t0, 2), jobs=sorted({r["job"] for r in results if r["job"] is not None}),
                      states=[r["state"] for r in results], pending=sum(r["state"] == "pending" for r in results))
    else:
        # Half of the solutions for each client, so that neither is answered from the other's jobs.
        verl_rows, trl_rows = rows[0::2], rows[1::2]
        t0 = time.monotonic()
        verl_s = None if a.seconds is None else 0.55 * a.seconds
        # Not asyncio.run: it would wait for the blocking calls still out past the deadline.
        loop = asyncio.new_event_loop()
        report["verl"] = loop.run_until_complete(verl_client(verl_rows, a.concurrency, verl_s))
        loop.close()
        trl_s = None if a.seconds is None else max(0.0, a.seconds - (time.monotonic() - t0))
        report["trl"] = trl_client(trl_rows, a.batch, trl_s)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    brief = {k: ({kk: vv for kk, vv in v.items() if kk != "rewards"} if isinstance(v, dict) else v) for k, v in report.items() if k != "jobs"}
    print(json.dumps(brief), flush=True)
    # Calls cut off by a deadline may still be waiting on the server in threads: do not wait.
    os._exit(0)


if __name__ == "__main__":
    main()
