#!/usr/bin/env bash
# Issue 34's remaining GPU proof in device calls on one warm nvidia-h100-x1 lease, from the
# repository root, `.carry/` holding cudal1-new.xz (this tree), cudal1-prev.xz (d5f8bad, before
# admission by memory), h100.json and KernelBench/ (none committed). Each call ends by itself
# within LIMIT seconds (default 570) and leaves at most 8 files under $OUT (logs and rows; the
# rest in one tarball). Every part shares one build cache (/tmp/cache-new) and the release's store
# (/root/rel.db, kept while the machine is warm; else carried back in as .carry/release.db).
#   CALL=throughput bash bench/gpu_calls34.sh  # correctness mode on bench/cuda_l1_batch.py's 40 rows: new, prev,
#                                              # new, prev after a warm-up; then the release in full mode
#   CALL=release bash bench/gpu_calls34.sh     # the release in full mode with --prefetch, resumed
#   CALL=serve bash bench/gpu_calls34.sh       # the rest of the release, then `serve` under the whole release
set -u
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O"
T0=$(date +%s)
left() { echo $(( ${LIMIT:-570} - ($(date +%s) - T0) - ${1:-0} )); }
release() { # the release in full mode, --prefetch, default lanes, into /root/rel.db
  local limit=$1
  [ "$limit" -gt 30 ] || return 0
  OUT=$O PARTS=release BUDGET=${REL_BUDGET:-0.5} REL_DB=/root/rel.db REL_CACHE=/tmp/cache-new REL_LIMIT=$limit \
    REL_ARGS="--prefetch true --suite $(realpath .carry/KernelBench)" bash bench/gpu_engine.sh
}
case ${CALL:?CALL=throughput, release or serve} in
throughput)
  OUT=$O PARTS="warm correctness_lanes" WARM_BIN=new LANES=default CORR_BINS="${CORR_BINS:-new prev new prev}" bash bench/gpu_engine.sh
  release "$(left 40)" ;;
release) release "$(left 40)" ;;
serve)
  [ "${SERVE_FIRST:-}" ] || release "$(left 330)"
  CUDAL1_CACHE_DIR=/tmp/cache-new OUT=$O LIMIT=$(left 45) bash bench/gpu_serve_release.sh ;;
esac
# At most 8 files come back: the logs, summaries, rows and the release's store stay; the rest is tarred.
cd "$O" && keep="engine.log summary.jsonl release.db release.jsonl.gz serve_release.log serve_release.rows.jsonl.gz serve_release.db"
others=$(ls | grep -vxF -f <(tr ' ' '\n' <<<"$keep") || true)
[ -n "$others" ] && tar czf rest.tgz $others && rm -f $others
ls -la "$O"
