#!/usr/bin/env bash
# Issue 13 on a GPU machine, from the repository root, with `.carry/cudal1-new` built from this
# tree: the runner's GPU tests, the CUDA corpus and the whole CPU corpus with --device cuda (each
# verdict against its `# cudal1: expect=` line), then the 40-kernel CUDA-L1 batch of
# bench/gpu_engine.sh (what capturing every timed call's output costs).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
B=$(realpath .carry/cudal1-new)
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O"
export CUDAL1_PYTHON=$(command -v python3)
exec > >(tee "$O/integrity.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== python/tests/test_gpu.py"
timeout 200 python3 -m pytest python/tests/test_gpu.py -q -p no:cacheprovider 2>&1 | tail -15
for part in cuda/ ""; do
  name=${part:-cpu-corpus/}
  echo "== tests/adversarial/${part} on cuda (budget ${BUDGET:-1} s)"
  timeout -s INT -k 30 "${CORPUS_LIMIT:-200}" "$B" eval --suite "tests/adversarial/${part}tasks" --candidates "tests/adversarial/${part}candidates" \
    --device cuda --budget "${BUDGET:-1}" --json --check-expectations --db "$O/adversarial.db" > "$O/adversarial_${name%/}.jsonl"
  echo "exit $?"
  python3 bench/suite_report.py "$O/adversarial_${name%/}.jsonl"
  gzip -f "$O/adversarial_${name%/}.jsonl"
done
checkpoint "$O/adversarial.db"
if [ -n "${THROUGHPUT_LIMIT:-}" ]; then
  PARTS=new NEW_LIMIT=$THROUGHPUT_LIMIT bash bench/gpu_engine.sh
fi
date -u
