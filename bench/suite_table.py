"""The suite's table from the stores of several runs: for every file under solutions/, the newest
evaluation of that exact file (content hash) against the current task file (content hash),
an H100 row preferred over another GPU's; with the expectation from the file's first line and the
eager time of each task from bench/eager_times.py.

usage: python bench/suite_table.py --rows ROWS.jsonl [--db STORE.db ...] [--eager EAGER.jsonl]
                                   [--export ALL.jsonl] > table.md
--rows reads exported rows (the format --export writes); --db reads cudal1 stores directly.
"""

import argparse
import glob
import hashlib
import json
import os
import re
import sqlite3


def from_store(path):
    con = sqlite3.connect(path)
    query = ("select task_name, candidate_label, verdict, reason, speedup_median, speedup_ci_low, speedup_ci_high, "
             "ref_ms, candidate_ms, environment, created_at, duration_ms, task_hash, candidate_hash, measurements "
             "from evaluations")
    for (task, cand, verdict, reason, s, lo, hi, ref_ms, cand_ms, env, at, dur, th, ch, meas) in con.execute(query):
        yield {"task": task, "candidate": cand, "verdict": verdict, "reason": reason, "speedup": s,
               "ci": [lo, hi] if s is not None else None, "ref_ms": ref_ms, "candidate_ms": cand_ms,
               "gpu": json.loads(env).get("gpu"), "at": at, "duration_s": dur / 1e3, "task_hash": th,
               "candidate_hash": ch, "measurements": json.loads(meas)}


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def expectation(path):
    with open(path) as f:
        m = re.match(r"#\s*cudal1:\s*expect=(\S+)", f.readline())
    return m.group(1) if m else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", action="append", default=[])
    ap.add_argument("--db", action="append", default=[])
    ap.add_argument("--eager")
    ap.add_argument("--export")
    args = ap.parse_args()
    rows = [json.loads(line) for p in args.rows for line in open(p)]
    rows += [r for p in args.db for r in from_store(p)]
    if args.export:
        with open(args.export, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["at"]))
    eager = {}
    if args.eager:
        eager = {r["task"]: r for r in map(json.loads, open(args.eager)) if "median_ms" in r}
    print("| task | eager ms (H100) | candidate | expected | verdict | speedup [95% CI] | reference ms | candidate ms | GPU |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    missing = mismatched = 0
    for path in sorted(glob.glob("solutions/level*/*/*.py")):
        level, stem, name = path.split("/")[1:]
        task = f"{level}/{stem}"
        th, ch = sha(f"tasks/{task}.py"), sha(path)
        found = [r for r in rows if r["task_hash"] == th and r["candidate_hash"] == ch]
        found.sort(key=lambda r: ("H100" in (r["gpu"] or ""), r["at"]))
        exp = expectation(path)
        e = eager.get(task)
        e_ms = f"{e['median_ms']:.3f}" if e else "-"
        if not found:
            missing += 1
            print(f"| {task} | {e_ms} | {name} | {exp} | not measured | | | | |")
            continue
        r = found[-1]
        if r["verdict"] != exp:
            mismatched += 1
        sp = f"{r['speedup']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]" if r["speedup"] is not None else "-"
        ref = f"{r['ref_ms']:.3f}" if r["ref_ms"] else "-"
        cand = f"{r['candidate_ms']:.3f}" if r["candidate_ms"] else "-"
        gpu = (r["gpu"] or "?").replace("NVIDIA ", "")
        print(f"| {task} | {e_ms} | {name} | {exp} | {r['verdict']} | {sp} | {ref} | {cand} | {gpu} |")
    print(f"\n{missing} file(s) not measured as they are now, {mismatched} verdict(s) different from the expectation.")


if __name__ == "__main__":
    main()
