#!/usr/bin/env bash
# The adversarial corpus on the GPU (issue 4): the whole corpus (tests/adversarial) and its CUDA
# part (tests/adversarial/cuda) with --device cuda, each verdict checked against its candidate's
# `# cudal1: expect=` line; then `tasks check` on the degenerate tasks.
# On the GPU machine, from the repository root:  bash bench/gpu_adversarial.sh .carry/cudal1
set -u
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O"
export CUDAL1_PYTHON=$(command -v python3)
exec > >(tee "$O/adversarial.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for part in cuda/ ""; do
  name=${part:-cpu-corpus/}
  echo "== tests/adversarial/${part} on cuda"
  "$B" eval --suite "tests/adversarial/${part}tasks" --candidates "tests/adversarial/${part}candidates" --device cuda \
    --json --check-expectations --db "$O/adversarial.db" > "$O/adversarial_${name%/}.jsonl"
  echo "exit $?"
  python3 bench/suite_report.py "$O/adversarial_${name%/}.jsonl"
done
echo "== tasks check tests/adversarial/degenerate on cuda"
"$B" tasks check tests/adversarial/degenerate --device cuda --json > "$O/degenerate.jsonl"
echo "exit $? (1 is expected: the degenerate tasks are flagged)"
cat "$O/degenerate.jsonl"
date -u
