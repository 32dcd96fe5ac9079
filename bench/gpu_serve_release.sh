#!/usr/bin/env bash
# Issue 34, `serve` under a batch of CUDA-L1's release: every row with code sent to `cudal1 serve`
# in one `/v1/reward/submit` (the default lanes judge them together), then compared with one lane.
# From the repository root on the GPU machine, with `.carry/` holding cudal1-new.xz, h100.json and
# KernelBench/ (none committed):
#   OUT=$OUT bash bench/gpu_serve_release.sh            # MODE=correctness (default) or full; LIMIT s
# Brings back under $OUT: serve_release.log, serve.log.gz, serve_release.rows.jsonl.gz and the
# store (serve_release.db, checkpointed; carried back in as .carry/serve_release.db, a cut-off run
# resumes: finished jobs come back as cached).
# On a CPU, a release made of the repository's own tasks and solutions (rows with level_id,
# task_id, ref_code, custom_code): DEVICE=cpu RELEASE=small.json KB=tasks BIN=target/release/cudal1
# SERVE_ARGS="--scale 0.01" bash bench/gpu_serve_release.sh
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
C=$(realpath .carry)
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O" /tmp/bins
export CUDAL1_PYTHON=${CUDAL1_PYTHON:-$(command -v python3)}
export CUDAL1_CACHE_DIR=${CUDAL1_CACHE_DIR:-/tmp/cudal1-cache}
export CUDAL1_SERVE_TOKEN=${CUDAL1_SERVE_TOKEN:-bench-token}
B=${BIN:-/tmp/bins/cudal1-new}
[ -n "${BIN:-}" ] || unpack_missing "$C/cudal1-new.xz" "$B"
REL=${RELEASE:-$C/h100.json}
KB=${KB:-$C/KernelBench}
exec > >(tee -a "$O/serve_release.log") 2>&1
date -u; [ "${DEVICE:-cuda}" = cpu ] || nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
S_DIR=/tmp/cudal1-relsuite; rm -rf "$S_DIR"
python3 bench/serve_release.py suite "$REL" "$KB" "$S_DIR" || exit 2
db="$O/serve_release.db"
[ -f "$db" ] || { [ -f "$C/serve_release.db" ] && cp "$C/serve_release.db" "$db"; }
MODE=${MODE:-correctness}
P=$(port); URL=http://127.0.0.1:$P
t0=$(date +%s)
"$B" serve --suite "$S_DIR" --listen 127.0.0.1:$P --device "${DEVICE:-cuda}" --mode "$MODE" --db "$db" ${SERVE_ARGS:-} > "$O/serve.log" 2>&1 &
S=$!
if wait_up "$URL" $S; then
  echo "== serve up in $(( $(date +%s) - t0 )) s; submitting the release (mode $MODE)"
  timeout -s INT "${LIMIT:-500}" python3 bench/serve_release.py submit "$REL" "$KB" "$URL" "$O/serve_release.rows.jsonl" --mode "$MODE"
  echo "client exit $? after $(( $(date +%s) - t0 )) s"
else
  echo "error: serve did not start"; tail -20 "$O/serve.log"
fi
stop $S
wait $S; echo "serve exit $?"
checkpoint "$db"
[ -f "$O/serve_release.rows.jsonl" ] && gzip -f "$O/serve_release.rows.jsonl"
gzip -f "$O/serve.log"
ps -eo pid,ppid,stat,etime,cmd | awk 'NR==1 || /[p]ython/ || $3 ~ /^Z/' | grep -v "awk\|ps -eo" | head -10
date -u
