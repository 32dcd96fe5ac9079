#!/usr/bin/env bash
# Issue 15 part 2: the report of a GPU session. Evaluates the bundled suite (tasks/ + solutions/)
# and, when CUDA_L1_JSON names one, CUDA-L1's release for this GPU (claimed beside measured; with
# KERNELBENCH=path/to/KernelBench for KernelBench's task names), into the store that
# bench/gpu_baselines.sh filled (DB; its baselines become fast_p curves), then writes one
# self-contained report.html with both batches side by side. Each evaluation pass is cut by
# `timeout -s INT` so that what finished is saved; run it again to resume.
# On the GPU machine, from the repository root:
#   DB=$OUT/baselines.db CUDA_L1_JSON=CUDA-L1/optimized_cuda_code/h100.json bash bench/gpu_report.sh .carry/cudal1
# A pass cut by its limit finishes what is under way (a CUDA-L1 row can take a minute) and is
# killed 90 s later; keep the whole call inside the device's limit with an outer `timeout -s INT`.
# Everything comes back under $OUT: the JSON lines of each pass, a log, the store and report.html.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O"
DB=${DB:-$O/report.db}
DEVICE=${DEVICE:-cuda}
SUITE=${SUITE:-tasks}
CANDS=${CANDS:-solutions}
LIMIT=${LIMIT:-240}
SUITE_LIMIT=${SUITE_LIMIT:-$LIMIT}
REL_LIMIT=${REL_LIMIT:-$LIMIT}
# One second of timed blocks per candidate, as bench/gpu_baselines.sh and bench/gpu_engine.sh use:
# the budget is part of the key that resumes a run from the store.
BUDGET=${BUDGET:-1}
export CUDAL1_PYTHON=${CUDAL1_PYTHON:-$(command -v python3)}
exec > >(tee -a "$O/report.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null; nproc

batch_of() { python3 -c 'import json,sys; print(next((json.loads(l)["summary"]["batch"] for l in open(sys.argv[1]) if l.startswith("{\"summary\"")), ""))' "$1"; }

echo "== the bundled suite: $SUITE with $CANDS (limit $SUITE_LIMIT s, budget $BUDGET s)"
timeout -s INT -k 90 "$SUITE_LIMIT" "$B" eval --suite "$SUITE" --candidates "$CANDS" --device "$DEVICE" --budget "$BUDGET" --db "$DB" --json > "$O/suite.jsonl"
echo "exit $? (130: cut by the limit; what finished is stored)"
# The report shows the batches of these passes; a pass killed before its summary (no batch id
# printed) makes it show every batch in the store, so that its rows are not left out.
args=(); unnamed=0
b=$(batch_of "$O/suite.jsonl"); if [ -n "$b" ]; then args+=(--batch "$b"); else unnamed=1; fi
if [ -n "${CUDA_L1_JSON:-}" ]; then
  echo "== CUDA-L1's release: $CUDA_L1_JSON (limit $REL_LIMIT s, budget $BUDGET s)"
  # -v: each candidate's compiling, compiled, started and timing go to cuda_l1.log, so that a
  # pass that judges nothing for minutes (session 10's call 6) says what held the device.
  timeout -s INT -k 90 "$REL_LIMIT" "$B" -v eval --from cuda-l1 "$CUDA_L1_JSON" ${KERNELBENCH:+--suite "$KERNELBENCH"} --device "$DEVICE" --budget "$BUDGET" --db "$DB" --json > "$O/cuda_l1.jsonl" 2> "$O/cuda_l1.log"
  echo "exit $? (130: cut by the limit; what finished is stored)"
  b=$(batch_of "$O/cuda_l1.jsonl"); if [ -n "$b" ]; then args+=(--batch "$b"); else unnamed=1; fi
fi
if [ "$unnamed" = 1 ]; then
  echo "a pass ended without its summary: the report shows every batch in the store"
  args=(); for b in $(python3 -c "import sqlite3,sys; [print(r[0]) for r in sqlite3.connect(sys.argv[1]).execute('select id from batches')]" "$DB"); do args+=(--batch "$b"); done
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
"$B" report --db "$DB" "${args[@]}" --title "cudal1 on ${gpu:-$DEVICE}" -o "$O/report.html"
checkpoint "$DB"
date -u
