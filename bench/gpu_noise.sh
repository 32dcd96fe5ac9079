#!/usr/bin/env bash
# Noise bench (issue 2, Done-when b): 5 evaluations of one correct candidate on each of three
# tasks (~20 us, ~200 us, >= 2 ms eager), each in a fresh cudal1 process.
# On the GPU machine, from the repository root:  bash bench/gpu_noise.sh .carry/cudal1
set -u
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
RUNS=${RUNS:-5}
mkdir -p "$O"
export CUDAL1_PYTHON=$(command -v python3)
exec > >(tee "$O/noise.log") 2>&1
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for i in $(seq "$RUNS"); do
  /usr/bin/time -f "run $i: %e s" "$B" eval --suite bench/noise/tasks --candidates bench/noise/candidates --device cuda \
    --json --force --db "$O/noise.db" >> "$O/noise.jsonl"
done
python3 bench/noise_report.py "$O/noise.jsonl"
date -u
