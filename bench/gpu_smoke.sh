#!/usr/bin/env bash
# First GPU check, and the noise and side-stream benches (issue 2, Done-when b and d).
# On the GPU machine, from the repository root:  bash bench/gpu_smoke.sh .carry/cudal1
set -u
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O"
export CUDAL1_PYTHON=$(command -v python3)
exec > >(tee "$O/smoke.log") 2>&1
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

echo "== single eval with load_inline (compile pool + cache + sandbox on CUDA)"
time "$B" -v eval --task bench/noise/tasks/level1/1_Gelu_1M.py --candidate bench/noise/candidates/level1/1_Gelu_1M.py \
  --device cuda --db "$O/smoke.db" --force

echo "== side stream (d): cudal1"
time "$B" eval --suite bench/sidestream/tasks --candidates bench/sidestream/candidates --device cuda --json --force \
  --db "$O/smoke.db" > "$O/sidestream.jsonl"
cat "$O/sidestream.jsonl" | python3 -c 'import sys,json
for l in sys.stdin:
    r=json.loads(l)
    if "summary" in r: continue
    print(r["candidate"].split("/")[-1], r["verdict"], r["speedup"], r["ref_ms"], r["candidate_ms"])'
echo "== side stream (d): KernelBench-style serial loop"
python3 bench/serial_loop.py bench/sidestream/tasks bench/sidestream/candidates --json "$O/sidestream_loop.json" | cut -c1-400

echo "== noise (b): 5 runs of each of 3 tasks"
for i in 1 2 3 4 5; do
  "$B" eval --suite bench/noise/tasks --candidates bench/noise/candidates --device cuda --json --force --db "$O/noise.db" >> "$O/noise.jsonl"
done
python3 - "$O/noise.jsonl" <<'PY'
import json, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "summary" in r: continue
    runs[r["task"]].append((r["verdict"], r["speedup"]["median"] if r["speedup"] else None, r["ref_ms"], r["candidate_ms"]))
for task, rs in sorted(runs.items()):
    s = [x[1] for x in rs if x[1]]
    spread = max(s) / min(s) - 1 if s else None
    print(task, "verdicts", [x[0] for x in rs], "speedups", [round(x, 4) for x in s], "spread", spread, "ref_ms", [round(x[2], 4) for x in rs])
PY
date -u
