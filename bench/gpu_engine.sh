#!/usr/bin/env bash
# Issue 12's benches on a GPU machine, from the repository root, with `.carry/` holding
# cudal1-new (this tree's release build), cudal1-old (c075853's, the code before the engine) and
# h100.json (CUDA-L1's optimized_cuda_code/h100.json):
#   PARTS="throughput" bash bench/gpu_engine.sh      # 40 CUDA-L1 kernels (20 build extensions): new, then old
#   PARTS="new" / PARTS="old"                        # one of the two
#   PARTS="correctness" bash bench/gpu_engine.sh     # the same batch, --mode correctness, cold and warm caches
#   PARTS="new correctness_lanes" LANES="4 8"        # after `new`, correctness mode with its warm build cache, per lane count
#                                                    # (LANES="default default": twice without --lanes); CORR_BINS="new abc123"
#                                                    # runs each lane count with .carry/cudal1-new, then .carry/cudal1-abc123
# Binaries carried compressed (.carry/cudal1-*.xz) are unpacked first. Each run's summary has the
# machine's CPU use over the run (busy share of all cores, from /proc/stat).
#   PARTS="release" bash bench/gpu_engine.sh         # every row of the release through --from cuda-l1 (resumes;
#                                                    # REL_ARGS=--pipeline, REL_DB=/root/rel.db across calls,
#                                                    # REL_CACHE: its build cache, default /tmp/cache-rel)
#   PARTS="release_rows" REL_ROWS="3/6 1/93" bash bench/gpu_engine.sh  # those rows of the release again (--force),
#                                                    # into REL_DB (e.g. the store that holds the whole release)
#   PARTS="pipeline" bash bench/gpu_engine.sh        # the same batch, new binary, without then with --pipeline
#                                                    # (timed jobs loaded and checked on every lane, timed one at a time)
# Everything comes back under $OUT: logs, JSON rows, the stores (checkpointed), and per run a
# timeline (NAME.stamps: each row's arrival in seconds after the start, its verdict and phases).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
C=$(realpath .carry)
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O"
export CUDAL1_PYTHON=$(command -v python3)
BUDGET=${BUDGET:-1}
default_runs=0
exec > >(tee -a "$O/engine.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
for x in "$C"/cudal1-*.xz; do
  [ -f "$x" ] || continue
  [ -f "${x%.xz}" ] || unpack "$x" "${x%.xz}"
done
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $5+$6}' /proc/stat; }
python3 bench/cuda_l1_batch.py "$C/h100.json" /tmp/tp

batch() { # NAME BINARY LIMIT_S CACHE EXTRA...
  local name=$1 bin=$2 limit=$3 cache=$4; shift 4
  echo "== $name (budget $BUDGET s, limit $limit s) $*"
  # A run cut off in an earlier call resumes from its store, carried back in as .carry/NAME.db.
  [ -f "$O/$name.db" ] || { [ -f "$C/$name.db" ] && cp "$C/$name.db" "$O/$name.db"; }
  local start=$(date +%s.%N) ticks0=$(cpu_ticks)
  echo "start $(date -u +%FT%T.%NZ)"
  # Each row's arrival, seconds after the start, goes to NAME.stamps (the run's timeline).
  CUDAL1_CACHE_DIR="$cache" timeout -s INT -k 45 "$limit" "$bin" eval --suite /tmp/tp/tasks --candidates /tmp/tp/candidates.jsonl \
    --device cuda --json --budget "$BUDGET" --db "$O/$name.db" "$@" | tee "$O/$name.jsonl" | python3 bench/stamp_rows.py "$start" > "$O/$name.stamps"
  echo "exit ${PIPESTATUS[0]} at $(date -u +%FT%T.%NZ); last row at $(tail -n 2 "$O/$name.stamps" | head -n 1 | cut -f1) s, exit at $(python3 -c "import sys,time; print(round(time.time() - float(sys.argv[1]), 3))" "$start") s"
  local end=$(date +%s.%N) ticks1=$(cpu_ticks)
  echo "$ticks0 $ticks1" | awk -v n="$name" '{printf "%s: CPU busy %.1f%% of all cores over the run\n", n, 100 * (1 - ($4 - $2) / ($3 - $1))}' 
  python3 bench/engine_report.py "$name" "$O/$name.jsonl" "$start" "$end" | tee -a "$O/summary.jsonl"
  checkpoint "$O/$name.db"
  gzip -f "$O/$name.jsonl"
}
for part in ${PARTS:-throughput}; do
  case $part in
  throughput)
    batch new "$C/cudal1-new" "${NEW_LIMIT:-250}" /tmp/cache-new
    batch old "$C/cudal1-old" "${OLD_LIMIT:-290}" /tmp/cache-old ;;
  new) batch new "$C/cudal1-new" "${NEW_LIMIT:-250}" /tmp/cache-new ;;
  pipeline)  # a correctness pass warms the build cache, so that both timed passes find every build
    batch warm "$C/cudal1-new" 120 /tmp/cache-pipe --mode correctness
    batch serial "$C/cudal1-new" "${NEW_LIMIT:-180}" /tmp/cache-pipe --force
    batch pipelined "$C/cudal1-new" "${NEW_LIMIT:-180}" /tmp/cache-pipe --force --pipeline ;;
  correctness_lanes)  # after `new`: its build cache is warm; LANES=default: no --lanes flag
    for l in ${LANES:-8}; do
      for bin in ${CORR_BINS:-new}; do
        tag=; [ "$bin" = new ] || tag="_$bin"
        if [ "$l" = default ]; then batch "correctness${tag}_default$((++default_runs))" "$C/cudal1-$bin" 90 /tmp/cache-new --mode correctness
        else batch "correctness${tag}_lanes$l" "$C/cudal1-$bin" 90 /tmp/cache-new --mode correctness --lanes "$l"; fi
      done
    done ;;
  warm)  # instead of `new` before correctness_lanes: only fills the build cache (WARM_BIN=new)
    batch warm "$C/cudal1-${WARM_BIN:-new}" "${WARM_LIMIT:-200}" /tmp/cache-new --mode correctness ;;
  old) batch old "$C/cudal1-old" "${OLD_LIMIT:-290}" /tmp/cache-old ;;
  correctness)
    batch correctness_cold "$C/cudal1-new" 200 /tmp/cache-corr --mode correctness
    batch correctness_warm "$C/cudal1-new" 120 /tmp/cache-corr --mode correctness --force ;;
  release)
    echo "== release: every row of h100.json (budget $BUDGET s) ${REL_ARGS:-}"
    # A run cut off earlier resumes from its store: REL_DB on this machine (kept between calls of
    # one lease), else the one carried back in as .carry/release.db.
    DB=${REL_DB:-$O/release.db}
    mkdir -p "$(dirname "$DB")"
    [ -f "$DB" ] || { [ -f "$C/release.db" ] && cp "$C/release.db" "$DB"; }
    start=$(date +%s.%N)
    CUDAL1_CACHE_DIR=${REL_CACHE:-/tmp/cache-rel} timeout -s INT -k 60 "${REL_LIMIT:-520}" "$C/cudal1-new" eval --from cuda-l1 "$C/h100.json" \
      --device cuda --json --budget "$BUDGET" --db "$DB" ${REL_ARGS:-} > "$O/release.jsonl"
    echo "exit $?"
    end=$(date +%s.%N)
    python3 bench/engine_report.py release "$O/release.jsonl" "$start" "$end" | tee -a "$O/summary.jsonl"
    checkpoint "$DB"
    [ "$DB" -ef "$O/release.db" ] || cp "$DB" "$O/release.db"
    gzip -f "$O/release.jsonl" ;;
  release_rows)
    echo "== release rows again: ${REL_ROWS:?names like 3/6} (budget $BUDGET s)"
    DB=${REL_DB:-$O/release.db}
    python3 - "$C/h100.json" /tmp/rows.json $REL_ROWS <<'PY'
import json, sys
src, dst, wanted = sys.argv[1], sys.argv[2], set(sys.argv[3:])
with open(src) as f, open(dst, "w") as out:
    for line in f:
        r = json.loads(line)
        if f"{r['level_id']}/{r['task_id']}" in wanted:
            out.write(line)
PY
    start=$(date +%s.%N)
    CUDAL1_CACHE_DIR=/tmp/cache-rows timeout -s INT -k 60 "${REL_LIMIT:-300}" "$C/cudal1-new" eval --from cuda-l1 /tmp/rows.json \
      --device cuda --json --budget "$BUDGET" --db "$DB" --force > "$O/release_rows.jsonl"
    echo "exit $?"
    end=$(date +%s.%N)
    python3 bench/engine_report.py release_rows "$O/release_rows.jsonl" "$start" "$end" | tee -a "$O/summary.jsonl"
    checkpoint "$DB"
    [ "$DB" -ef "$O/release.db" ] || cp "$DB" "$O/release.db" ;;
  esac
done
date -u
