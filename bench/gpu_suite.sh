#!/usr/bin/env bash
# The bundled suite on the GPU (issue 3): every solution against its task, and the eager time of
# every reference. One level per call keeps each call within the device's 10-minute limit.
# On the GPU machine, from the repository root:  LEVEL=1 bash bench/gpu_suite.sh .carry/cudal1
#   LEVEL=N   only tasks/levelN (default: every level)
#   SEL=...   only these solution files (globs relative to the repository root), copied to sel/
#   TRIALS=D  also the candidates under D (laid out like solutions/), copied to sel/ as well
#   LIMIT=S   stop cudal1 after S seconds (it drains, prints what finished; rerun to resume)
# Results: $OUT/suite.jsonl, $OUT/suite.log and the store $OUT/suite.db (bring back all three
# suite.db* files: a run that is cut off has its rows only there).
set -u
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
T=tasks${LEVEL:+/level$LEVEL}
C=solutions
mkdir -p "$O"
export CUDAL1_PYTHON=$(command -v python3)
if [ -n "${SEL:-}${TRIALS:-}" ]; then
  C=sel
  rm -rf sel
  for f in ${SEL:-}; do
    mkdir -p "sel/$(dirname "${f#solutions/}")"
    cp "$f" "sel/${f#solutions/}"
  done
  [ -n "${TRIALS:-}" ] && mkdir -p sel && cp -r "$TRIALS"/. sel/
fi
exec > >(tee -a "$O/suite.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "candidates: $C ($(find "$C" -name '*.py' | wc -l) files), tasks: $T"
timeout -s TERM "${LIMIT:-0}" "$B" eval --suite "$T" --candidates "$C" --device cuda --json --check-expectations \
  --db "$O/suite.db" ${CUDAL1_ARGS:-} >> "$O/suite.jsonl"
echo "exit $?"
python3 bench/suite_report.py "$O/suite.jsonl"
date -u
