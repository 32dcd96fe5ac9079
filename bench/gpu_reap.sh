#!/usr/bin/env bash
# Issue 34, zombies, on a GPU machine, from the repository root, with this tree's binary in
# `.carry/cudal1-new.xz` (`cargo build --release -p cudal1-cli && mkdir -p .carry &&
# xz -3 -c target/release/cudal1 > .carry/cudal1-new.xz`; carry `.carry`):
#   bash bench/gpu_reap.sh               # about 4 minutes; results under $OUT (reap.log)
# The batch that left one `[python3] <defunct>` per candidate (PPID 1) on 2026-11-27: a task with
# a 4 GiB input, three correct candidates, `--mode correctness --lanes 1` (prefetch on, the GPU's
# default), cut by one SIGINT after 100 s; then the same batch uncut. After each run it lists every
# zombie and every python process left (the container's PID 1 does not reap), with its parent.
# Expected with this tree: nothing after either run (`left: 0`).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O" /tmp/bins
export CUDAL1_PYTHON=$(command -v python3)
unpack .carry/cudal1-new.xz /tmp/bins/cudal1
exec > >(tee "$O/reap.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
W=/tmp/reap; rm -rf "$W"; mkdir -p "$W/tasks/level1" "$W/cands/level1/1_Big_Scale"
N=$(( ${SIZE_GIB:-4} << 28 ))  # float32 elements
printf 'import torch\nimport torch.nn as nn\n\nn = %s\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x * 2.0\n\n\ndef get_inputs():\n    return [torch.randn(n)]\n\n\ndef get_init_inputs():\n    return []\n' "$N" > "$W/tasks/level1/1_Big_Scale.py"
for i in 1 2 3; do
  printf 'import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x + x  # %s\n' "$i" > "$W/cands/level1/1_Big_Scale/c$i.py"
done
left() {
  sleep 2
  ps -eo pid,ppid,stat,etime,cmd | awk 'NR==1 || /[p]ython/ || $3 ~ /^Z/' | grep -v "awk\|ps -eo"
  echo "left: $(ps -eo stat,cmd | awk '/[p]ython/ || $1 ~ /^Z/' | grep -vc 'awk\|ps -eo')"
}
echo "-- before"; left
for limit in 100 600; do
  echo "== --lanes 1, cut by SIGINT after ${limit} s (600: not cut)"
  t0=$(date +%s)
  timeout -s INT -k 30 "$limit" /tmp/bins/cudal1 eval --suite "$W/tasks" --candidates "$W/cands" --device cuda \
    --mode correctness --lanes 1 --json --db "$O/reap-$limit.db" > "$O/reap-$limit.jsonl"
  echo "exit $? in $(( $(date +%s) - t0 )) s; rows: $(grep -c verdict "$O/reap-$limit.jsonl")"
  left
done
