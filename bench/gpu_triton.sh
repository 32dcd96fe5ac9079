#!/usr/bin/env bash
# Issue 31 on a GPU machine, from the repository root, with this tree's binary carried as
# `.carry/cudal1-new.xz`:
#   bash bench/gpu_triton.sh                     (PARTS="eval pytest": 3-5 minutes, at most 10)
# eval: `cudal1 eval` in the full mode (one job at a time, the engine's default lanes) of
#   1. solutions/level1/8_GELU_Tanh_Formula/fast_triton.py (a Triton kernel, `expect=correct faster`);
#   2. the CUDA corpus's autotuned Triton look-alike (`@triton.autotune`, three configs) on its
#      light task (`expect=correct`);
#   then both at once with the task's CUDA solution and a correctness-only run beside them
#   (`--suite`), so that the Triton job's warm-up meets other jobs.
#   For each it prints the verdict, the speedup, `measurements.phases_ms` and
#   `measurements.triton`, and checks what issue 31 asks: a `triton_warmup` phase, `off_slot`
#   true (the warm-up ran before the job held the device alone: `device_wait_timing` follows),
#   at least one kernel binary compiled in the warm-up and none while timed.
# pytest: python/tests/test_gpu.py -k triton (the runner's side: the warm-up call compiles, the
#   checks and the timed blocks add no binary to the process's Triton cache).
# Results under $OUT: triton.log, the evaluations' JSON (*.json, gzipped JSON lines).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O" /tmp/bins
export CUDAL1_PYTHON=$(command -v python3)
unpack .carry/cudal1-new.xz /tmp/bins/cudal1-new
exec > >(tee "$O/triton.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
B=/tmp/bins/cudal1-new
FAILED=0
check() { # json-file [expect-faster]
  python3 - "$@" <<'PY' || FAILED=1
import json, sys
path, faster = sys.argv[1], len(sys.argv) > 2
text = open(path).read().strip()
rows = [json.loads(text)] if text else []
bad = 0 if rows else 1
for r in rows:
    if "verdict" not in r:
        continue
    m = r["measurements"]
    s = r.get("speedup") or {}
    print(f"-- {r['candidate']}: {r['verdict']} ({r['reason_class']}) speedup {s.get('median')} [{s.get('ci_low')}, {s.get('ci_high')}]")
    print("   phases_ms:", json.dumps({k: round(v, 1) for k, v in sorted(m.get("phases_ms", {}).items(), key=lambda kv: kv[1], reverse=True)}))
    print("   triton:", json.dumps(m.get("triton")))
    if r.get("warnings"):
        print("   warnings:", [w["class"] for w in r["warnings"]])
    t = m.get("triton")
    if t is None:
        print("   FAIL: no measurements.triton"); bad += 1
        continue
    phases = m.get("phases_ms", {})
    problems = []
    if r["verdict"] != "correct": problems.append("not correct")
    if faster and not (s.get("ci_low") or 0) > 1: problems.append("not faster (interval not above 1)")
    if not t["off_slot"]: problems.append("warm-up on the slot")
    if t["compiled_in_warmup"] < 1: problems.append("nothing compiled in the warm-up")
    if t["compiled_while_timed"] != 0: problems.append("compiled while timed")
    if "triton_warmup" not in phases or "device_wait_timing" not in phases: problems.append("phases missing")
    print("   " + ("OK: the Triton build (warm-up %.0f ms, %d binaries) ran off the timing slot, none while timed" % (t["warmup_ms"], t["compiled_in_warmup"]) if not problems else "FAIL: " + ", ".join(problems)))
    bad += bool(problems)
sys.exit(1 if bad else 0)
PY
}
for part in ${PARTS:-eval pytest}; do
  case $part in
    eval)
      echo "== 1. solutions/level1/8_GELU_Tanh_Formula/fast_triton.py (full mode)"
      timeout -s INT -k 20 150 $B eval --task tasks/level1/8_GELU_Tanh_Formula.py \
        --candidate solutions/level1/8_GELU_Tanh_Formula/fast_triton.py --device cuda --budget 2 \
        --json --db "$O/triton.db" > "$O/fast_triton.json"; echo "exit $?"
      check "$O/fast_triton.json" faster
      echo "== 2. the autotuned look-alike (full mode)"
      timeout -s INT -k 20 100 $B eval --task tests/adversarial/cuda/tasks/level1/2_Light_Gelu_Scale.py \
        --candidate tests/adversarial/cuda/candidates/level1/2_Light_Gelu_Scale/triton_autotuned.py \
        --device cuda --budget 1 --json --db "$O/triton.db" > "$O/triton_autotuned.json"; echo "exit $?"
      check "$O/triton_autotuned.json"
      echo "== 3. beside other jobs: the GELU task's solutions at once (full mode, --force)"
      S=$(mktemp -d); mkdir -p "$S/tasks/level1" "$S/cands/level1"
      cp tasks/level1/8_GELU_Tanh_Formula.py "$S/tasks/level1/"
      cp -r solutions/level1/8_GELU_Tanh_Formula "$S/cands/level1/"
      timeout -s INT -k 20 200 $B eval --suite "$S/tasks" --candidates "$S/cands" --device cuda --budget 1 \
        --json --force --check-expectations --db "$O/triton.db" > "$O/gelu_suite.jsonl"; echo "exit $?"
      python3 - "$O/gelu_suite.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "verdict" in r:
        s = r.get("speedup") or {}
        print(f"   {r['candidate'].split('/')[-1]:16} {r['verdict']:10} {s.get('median')}  triton={json.dumps(r['measurements'].get('triton'))}")
    elif "summary" in r:
        print("   counts:", json.dumps(r["summary"].get("counts")))
PY
      gzip -f "$O/gelu_suite.jsonl"
      checkpoint "$O/triton.db"
      ;;
    pytest)
      echo "== python/tests/test_gpu.py -k triton"
      timeout 150 python3 -m pytest python/tests/test_gpu.py -q -p no:cacheprovider -k triton 2>&1 | tail -15
      [ "${PIPESTATUS[0]}" = 0 ] || FAILED=1 ;;
    *) echo "unknown part $part" ;;
  esac
done
echo "python processes left: $(pgrep -c python || true)"
date -u
echo "gpu_triton: $([ $FAILED = 0 ] && echo all checks passed || echo SOME CHECKS FAILED)"
