"""Spread (max/min - 1) of the median speedup over repeated runs, per task, from cudal1's --json rows."""
import collections
import json
import sys

runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    row = json.loads(line)
    if "summary" in row:
        continue
    runs[row["task"]].append(row)
for task, rows in sorted(runs.items()):
    speedups = [r["speedup"]["median"] for r in rows if r["speedup"]]
    spread = max(speedups) / min(speedups) - 1 if speedups else float("nan")
    print(f"{task}: runs={len(rows)} verdicts={[r['verdict'] for r in rows]}")
    print(f"  median speedups {[round(s, 4) for s in speedups]} spread {spread * 100:.2f}%")
    print(f"  reference ms {[round(r['ref_ms'], 4) for r in rows if r['ref_ms']]}")
    print(f"  candidate ms {[round(r['candidate_ms'], 4) for r in rows if r['candidate_ms']]}")
    print(f"  samples per side {[len(r['measurements']['timing']['reference_ms']) for r in rows if r['measurements']['timing']]}")
    timings = [r["measurements"]["timing"] for r in rows if r["measurements"]["timing"]]
    print(f"  windows {[t.get('window', {}).get('kind') if t.get('window') else None for t in timings]} spin us {[t.get('spin_us') and round(t['spin_us'], 1) for t in timings]}")
    for side in ("reference", "candidate"):
        issue = [t.get(f"{side}_issue_ms") for t in timings]
        tail = [t.get(f"{side}_tail_ms") for t in timings]
        print(f"  {side} issue us {[i and round(i * 1e3, 1) for i in issue]} tail us {[x and round(x * 1e3, 1) for x in tail]}")
    print(f"  warnings {sorted({w['class'] for r in rows for w in r.get('warnings', [])})}")
    print(f"  seconds per evaluation {[round(r['duration_ms'] / 1e3, 1) for r in rows]}")
