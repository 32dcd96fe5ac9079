"""CUDA-L1's release through `cudal1 serve`, as an RL engine would send it (issue 34: serve under a
batch gives the verdicts `eval --lanes 1` gives). Two steps:

    python3 bench/serve_release.py suite RELEASE.json KERNELBENCH_DIR SUITE_DIR
        writes each row's own reference (`ref_code`) as SUITE_DIR/level{L}/{name}.py, named as
        KernelBench names it (as `eval --from cuda-l1 --suite KernelBench` does), for `serve --suite`;
    python3 bench/serve_release.py submit RELEASE.json KERNELBENCH_DIR URL ROWS.jsonl [--mode M]
        submits every row with code in one `/v1/reward/submit` (each program in a python block, the
        way a model answers), polls `/v1/reward/get` until every job is done or failed, and writes
        one row per release row: task, candidate (`h100.json:LINE`, as `eval --from` names it),
        verdict, reason_class, reason, cached; then the counts and the wall time.
The token comes from $CUDAL1_SERVE_TOKEN. Compare with `bench/compare_lanes.py ROWS.jsonl ONE.rows.jsonl.gz`."""
import json
import os
import re
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path


def names(kernelbench):
    out = {}
    for level in (1, 2, 3):
        for f in Path(kernelbench, f"level{level}").glob("*.py"):
            m = re.match(r"(\d+)_", f.name)
            if m:
                out[(level, int(m.group(1)))] = f.stem
    return out


def release(path, kernelbench):
    known = names(kernelbench)
    for line, text in enumerate(open(path), start=1):
        r = json.loads(text)
        level, id_ = int(r["level_id"]), int(r["task_id"])
        stem = known.get((level, id_), f"{id_}_cuda_l1")
        yield line, f"level{level}/{stem}", r


def suite(path, kernelbench, out):
    n = 0
    for _, task, r in release(path, kernelbench):
        if r.get("ref_code"):
            dst = Path(out, task + ".py")
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(r["ref_code"])
            n += 1
    print(f"{n} tasks written under {out}")


def call(url, route, body, timeout=700):
    req = urllib.request.Request(
        url + route,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ.get("CUDAL1_SERVE_TOKEN", "")},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.load(resp)


def submit(path, kernelbench, url, rows_out, mode):
    t0 = time.time()
    items, where = [], []
    base = os.path.basename(path)
    for line, task, r in release(path, kernelbench):
        if r.get("ref_code") and r.get("custom_code"):
            items.append({"task": task, "completion": "Here is the program.\n\n```python\n" + r["custom_code"] + "\n```\n", "id": line})
            where.append((task, f"{base}:{line}"))
    sent = call(url, "/v1/reward/submit", {"items": items, "mode": mode})
    results = {res["index"]: res for res in sent["results"]}
    print(f"submitted {len(items)} items in {time.time() - t0:.1f} s: {dict(Counter(r['state'] for r in results.values()))}", flush=True)
    try:
        while True:
            pending = sorted({r["job"] for r in results.values() if r["state"] == "pending" and r.get("job") is not None})
            if not pending:
                break
            got = call(url, "/v1/reward/get", {"jobs": pending, "wait_s": 60})
            by_job = {g["job"]: g for g in got["results"]}
            for r in results.values():
                g = by_job.get(r.get("job"))
                if r["state"] == "pending" and g is not None and g["state"] != "pending":
                    r.update({k: g.get(k) for k in ("state", "verdict", "reason", "reason_class", "reward", "cached")})
            left = sum(1 for r in results.values() if r["state"] == "pending")
            print(f"{time.time() - t0:7.1f} s: {len(results) - left} of {len(results)} done", flush=True)
    except KeyboardInterrupt:  # cut off (timeout -s INT): the rows judged so far are written; pending ones say so
        print(f"interrupted after {time.time() - t0:.1f} s; the same command resumes (finished jobs come back cached)", flush=True)
    with open(rows_out, "w") as f:
        for i, (task, cand) in enumerate(where):
            r = results[i]
            f.write(json.dumps({"task": task, "candidate": cand, "verdict": r.get("verdict"), "reason_class": r.get("reason_class"),
                                "reason": r.get("reason"), "state": r["state"], "cached": r.get("cached")}) + "\n")
    counts = Counter(f"{r['state']}:{r.get('verdict')}/{r.get('reason_class')}" for r in results.values())
    print(json.dumps({"rows": len(results), "wall_s": round(time.time() - t0, 1), "counts": dict(counts)}))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["suite"] and len(a) == 4:
        suite(*a[1:])
    elif a[:1] == ["submit"] and len(a) in (5, 7):
        mode = a[6] if len(a) == 7 and a[5] == "--mode" else "correctness"
        submit(*a[1:5], mode)
    else:
        sys.exit(__doc__)
