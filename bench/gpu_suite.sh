#!/usr/bin/env bash
# The bundled suite on the GPU (issue 3): every solution against its task, and the eager time of
# every reference. One level per call keeps each call within the device's 10-minute limit.
# On the GPU machine, from the repository root:  LEVEL=1 bash bench/gpu_suite.sh .carry/cudal1
set -u
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
L=${LEVEL:-1}
mkdir -p "$O"
export CUDAL1_PYTHON=$(command -v python3)
exec > >(tee "$O/suite_level$L.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$B" eval --suite "tasks/level$L" --candidates solutions --device cuda --json --check-expectations \
  --db "$O/suite.db" ${CUDAL1_ARGS:-} > "$O/suite_level$L.jsonl"
echo "exit $?"
python3 bench/suite_report.py "$O/suite_level$L.jsonl"
date -u
