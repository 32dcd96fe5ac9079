"""Rows whose verdicts differ between two `cudal1 eval --json` runs of the same batch (gzip or not):
    python3 bench/compare_lanes.py A.jsonl[.gz] B.jsonl[.gz]
Prints the counts of each run, then one line per task and candidate whose verdict or reason class
differs (or that only one run judged), with both reasons' first lines. Rows without a verdict (no
code) count as not judged."""
import gzip
import json
import sys
from collections import Counter


def rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    out = {}
    with opener(path, "rt") as f:
        for line in f:
            r = json.loads(line)
            # A row with no verdict (the release had no code for it) counts as absent; candidates
            # are named by file and line, wherever the release lay on the machine that ran.
            if r.get("verdict") is not None:
                out[(r.get("task"), (r.get("candidate") or "").rsplit("/", 1)[-1])] = r
    return out


def main(a_path, b_path):
    a, b = rows(a_path), rows(b_path)
    for name, r in ((a_path, a), (b_path, b)):
        print(name, len(r), dict(Counter(f"{x['verdict']}/{x.get('reason_class')}" for x in r.values())))
    differ = 0
    for key in sorted(set(a) | set(b), key=str):
        x, y = a.get(key), b.get(key)
        vx = (x["verdict"], x.get("reason_class")) if x else None
        vy = (y["verdict"], y.get("reason_class")) if y else None
        if vx != vy:
            differ += 1
            why = lambda r: (r.get("reason") or "").splitlines()[0][:160] if r else "-"
            print(f"{key[0]}: {vx} | {vy}\n    {why(x)}\n    {why(y)}")
    # Warnings are objects in `eval --json`, class names in the reduced rows kept under docs/bench.
    again = sum(1 for r in a.values() for w in r.get("warnings") or [] if (w.get("class") if isinstance(w, dict) else w) == "judged_again_alone")
    print(f"{differ} row(s) differ; {again} row(s) of the first run were judged again alone")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
