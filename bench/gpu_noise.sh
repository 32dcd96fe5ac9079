#!/usr/bin/env bash
# Noise bench (issue 2, Done-when b): one correct candidate evaluated 5 times on each of three
# tasks (~20 us, ~200 us, >= 2 ms eager). Each evaluation is `cudal1 eval --task --candidate` in a
# fresh cudal1 process, one after another, nothing else on the machine.
# MODE=batch instead runs the three as one `--suite` batch per run (neighbouring candidates'
# start-up then overlaps the timing, as in a real batch).
# ONLY=1_Gelu_1M limits single mode to the tasks whose file names contain it.
# On the GPU machine, from the repository root:  bash bench/gpu_noise.sh .carry/cudal1
set -u
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
RUNS=${RUNS:-5}
MODE=${MODE:-single}
D=bench/noise
mkdir -p "$O"
export CUDAL1_PYTHON=$(command -v python3)
exec > >(tee -a "$O/noise.log") 2>&1
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "mode $MODE, runs $RUNS, extra arguments: ${CUDAL1_ARGS:-none}"
for i in $(seq "$RUNS"); do
  if [ "$MODE" = batch ]; then
    /usr/bin/time -f "run $i: %e s" "$B" eval --suite $D/tasks --candidates $D/candidates --device cuda \
      --json --force --db "$O/noise.db" ${CUDAL1_ARGS:-} >> "$O/noise.jsonl"
  else
    for task in $D/tasks/level1/*${ONLY:-}*.py; do
      /usr/bin/time -f "run $i $(basename "$task"): %e s" "$B" eval --task "$task" \
        --candidate "$D/candidates/level1/$(basename "$task")" --device cuda --json --force --db "$O/noise.db" \
        ${CUDAL1_ARGS:-} | tr -d '\n' >> "$O/noise.jsonl"
      echo >> "$O/noise.jsonl"
    done
  fi
done
python3 bench/noise_report.py "$O/noise.jsonl"
date -u
