#!/usr/bin/env bash
# Issue 15 part 1: baselines of the bundled suite (tasks/) on one GPU: eager, CUDA graphs and
# torch.compile (default, reduce-overhead, max-autotune), each measured by the same protocol as
# candidates and stored. Three passes, each cut by `timeout -s INT` so that what finished is
# saved; the whole script stays under ~8 minutes. Run it again to resume where it stopped (stored
# baselines are not measured again).
# On the GPU machine, from the repository root:  bash bench/gpu_baselines.sh .carry/cudal1
# BASE_ARGS: more flags for every pass (e.g. --pipeline). DB names the store (default
# $OUT/baselines.db; one kept on the machine lets a later call resume).
# A pass cut by its limit finishes what is under way (a baseline can take 40 s) and is
# killed 90 s later; keep the whole call inside the device's limit with an outer `timeout -s INT`.
# Everything comes back under $OUT: the JSON lines of each pass, a log and the store (checkpointed).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O"
export CUDAL1_PYTHON=${CUDAL1_PYTHON:-$(command -v python3)}
BUDGET=${BUDGET:-1}
DB=${DB:-$O/baselines.db}
exec > >(tee -a "$O/baselines.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc

pass() { # NAME LIMIT_S ARGS...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit $limit s): $*"
  timeout -s INT -k 90 "$limit" "$B" baselines tasks --device cuda --budget "$BUDGET" --json --db "$DB" ${BASE_ARGS:-} "$@" > "$O/$name.jsonl"
  echo "exit $? (130: cut by the limit; what finished is stored)"
  python3 - "$O/$name.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "summary" in r:
        print("summary:", json.dumps(r["summary"]["counts"]))
        continue
    s = r["speedup"]
    speed = f"{s['median']:.2f}x [{s['ci_low']:.2f}, {s['ci_high']:.2f}]" if s else "-"
    ms = lambda x: "-" if x is None else f"{x:.4f}"
    print(f"{r['task']:<40} {r['baseline']:<24} {r['status']:<9} {speed:<22} {ms(r['baseline_ms']):>9} {ms(r['reference_ms']):>9}  {r['reason'][:100] if r['status'] == 'failed' else ''}")
PY
}
pass eager_graphs_compile ${LIMIT1:-230} --names eager,cuda-graphs,compile-default
pass reduce_overhead ${LIMIT2:-110} --names compile-reduce-overhead
pass max_autotune ${LIMIT3:-110} --names compile-max-autotune
checkpoint "$DB"
echo "== the kernel's OOM kills, if any"; dmesg 2>/dev/null | grep -iE "killed process|out of memory" | tail -5
date -u
