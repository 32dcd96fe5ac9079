"""Reduces `eval --json` rows to what a record under docs/bench keeps (never a program's code):
task, candidate (a release row as `file:line` of its base name), verdict, class, reason, speedup,
warning classes, and with --phases the phases; an own-kernel share found for the row is added
(`own_share`, `own_profiled`, `own_error`).

    python3 bench/reduce_rows.py IN.jsonl[.gz] OUT.rows.jsonl.gz [--phases]
"""

import gzip
import json
import sys


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                yield json.loads(line)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    src, dst, phases = argv[0], argv[1], "--phases" in argv[2:]
    rows, shares = [], {}
    for r in read(src):
        if "own_share_of" in r:
            shares[r["own_share_of"].get("id")] = r
        elif "verdict" in r:
            rows.append(r)
    with gzip.open(dst, "wt", encoding="utf-8") as out:
        for r in rows:
            cand = str(r.get("candidate", ""))
            if ":" in cand:
                cand = cand.rsplit("/", 1)[-1]
            sp = r.get("speedup")
            kept = {
                "task": r.get("task"),
                "candidate": cand,
                "verdict": r.get("verdict"),
                "reason_class": r.get("reason_class"),
                "reason": (r.get("reason") or "").split("\n")[0],
                "speedup": sp.get("median") if isinstance(sp, dict) else sp,
                "warnings": [w.get("class") if isinstance(w, dict) else w for w in r.get("warnings") or []],
            }
            if phases:
                kept["phases_ms"] = (r.get("measurements") or {}).get("phases_ms")
            s = shares.get(r.get("id"))
            if s is not None:
                kept["own_share"] = s.get("own_share")
                kept["own_profiled"] = (s.get("own_kernels") or {}).get("profiled")
                if "own_share_error" in s:
                    kept["own_error"] = s["own_share_error"].split("\n")[0]
            out.write(json.dumps(kept) + "\n")
    print(f"{dst}: {len(rows)} rows")


if __name__ == "__main__":
    main(sys.argv[1:])
