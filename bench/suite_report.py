"""A table of a suite run from cudal1's --json rows: per candidate the verdict against its
expectation, the speedup, and each task's reference (eager) time."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1])]
summary = [r for r in rows if "summary" in r]
rows = [r for r in rows if "summary" not in r]
print(f"{'task':45} {'candidate':22} {'verdict':14} {'expected':10} {'speedup [95% CI]':24} {'ref ms':>8} {'cand ms':>8}")
for r in rows:
    s = r["speedup"]
    sp = f"{s['median']:.2f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}]" if s else "-"
    exp = (r.get("expect") or {}).get("verdict", "-")
    mark = "" if exp in ("-", r["verdict"]) else "  <-- differs"
    ref = f"{r['ref_ms']:.4f}" if r["ref_ms"] else "-"
    cand = f"{r['candidate_ms']:.4f}" if r["candidate_ms"] else "-"
    print(f"{r['task']:45} {r['candidate'].split('/')[-1]:22} {r['verdict']:14} {exp:10} {sp:24} {ref:>8} {cand:>8}{mark}")
    if mark:
        print("    reason:", r["reason"].splitlines()[0][:200])
for s in summary:
    print(json.dumps(s["summary"]))
