#!/usr/bin/env bash
# Throughput bench (issue 2, Done-when c): 20 candidates (10 load_inline) through cudal1, against
# a plain serial loop in one process (bench/serial_loop.py), both with empty build caches.
# On the GPU machine, from the repository root:  bash bench/gpu_throughput.sh .carry/cudal1
# PARTS picks what runs (default "cudal1 loop"); "loop:K/N" runs shard K of N of the loop, so that
# a loop longer than one sitting runs in N calls whose wall times add up.
set -u
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
W=$(mktemp -d)
mkdir -p "$O"
export CUDAL1_PYTHON=$(command -v python3)
exec > >(tee -a "$O/throughput.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 bench/make_throughput.py "$W/batch"
for part in ${PARTS:-cudal1 loop}; do
  case $part in
  cudal1)
    echo "== cudal1 (fresh cache) ${CUDAL1_ARGS:-}"
    start=$(date +%s.%N)
    CUDAL1_CACHE_DIR="$W/cache" "$B" eval --suite "$W/batch/tasks" --candidates "$W/batch/candidates" --device cuda \
      --json --force --db "$W/t.db" ${CUDAL1_ARGS:-} > "$O/throughput_cudal1.jsonl"
    end=$(date +%s.%N)
    python3 - "$O/throughput_cudal1.jsonl" "$start" "$end" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if "summary" not in r]
wall = float(sys.argv[3]) - float(sys.argv[2])
timed = sum(sum(r["measurements"]["timing"]["reference_ms"]) + sum(r["measurements"]["timing"]["candidate_ms"])
            for r in rows if r["measurements"].get("timing")) / 1e3
phases = {}
for r in rows:
    for k, v in r["measurements"].get("phases_ms", {}).items():
        phases[k] = phases.get(k, 0) + v / 1e3
print(json.dumps({"cudal1": {"candidates": len(rows), "wall_s": wall, "candidates_per_minute": len(rows) / wall * 60,
      "timed_share": timed / wall, "timed_s": timed, "phase_s": phases,
      "verdicts": {v: sum(r["verdict"] == v for r in rows) for v in set(r["verdict"] for r in rows)}}}))
PY
    ;;
  loop*)
    shard=${part#loop}; shard=${shard#:}; shard=${shard:-0/1}
    echo "== serial loop, shard $shard (fresh extension dir)"
    TORCH_EXTENSIONS_DIR="$W/loop-ext" python3 bench/serial_loop.py "$W/batch/tasks" "$W/batch/candidates" --shard "$shard" \
      --json "$O/throughput_loop_${shard/\//of}.json"
    ;;
  esac
done
date -u
