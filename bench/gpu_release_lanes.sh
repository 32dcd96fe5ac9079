#!/usr/bin/env bash
# Issue 34 on a GPU machine, from the repository root: CUDA-L1's whole release in correctness
# mode with the default lanes, then with one lane, each into a store of its own (both resume from
# `.carry/lanes-*.db` when a call was cut off). `.carry/` holds cudal1-new.xz, h100.json (CUDA-L1's
# optimized_cuda_code/h100.json) and KernelBench/ (levels 1-3 of a checkout); none is committed.
#   PARTS="default one" LIMIT=280 bash bench/gpu_release_lanes.sh
# Then `python3 bench/compare_lanes.py OUT/default.jsonl.gz OUT/one.jsonl.gz` (here) lists the rows
# whose verdicts differ.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
C=$(realpath .carry)
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O" /tmp/bins
export CUDAL1_PYTHON=$(command -v python3)
export CUDAL1_CACHE_DIR=${CUDAL1_CACHE_DIR:-/tmp/cudal1-cache}
unpack_missing "$C/cudal1-new.xz" /tmp/bins/cudal1-new
exec > >(tee -a "$O/lanes.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
for part in ${PARTS:-default one}; do
  case $part in
    default) lanes=() ;;
    one) lanes=(--lanes 1) ;;
    *) echo "unknown part $part"; continue ;;
  esac
  db="$O/lanes-$part.db"
  [ -f "$db" ] || { [ -f "$C/lanes-$part.db" ] && cp "$C/lanes-$part.db" "$db"; }
  echo "== $part: eval --from cuda-l1 h100.json --suite KernelBench --mode correctness ${lanes[*]}"
  t0=$(date +%s)
  timeout -s INT -k 20 "${LIMIT:-280}" /tmp/bins/cudal1-new eval --from cuda-l1 "$C/h100.json" --suite "$C/KernelBench" \
    --device cuda --mode correctness "${lanes[@]}" --json --db "$db" > "$O/$part.jsonl"
  echo "exit $? in $(( $(date +%s) - t0 )) s"
  tail -1 "$O/$part.jsonl" | python3 -c "import json,sys; s=json.loads(sys.stdin.read()).get('summary',{}); print(json.dumps(s.get('counts')), json.dumps(s.get('engine')))" || true
  checkpoint "$db"
  gzip -f "$O/$part.jsonl"
done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv; ps -eo pid,ppid,stat,etime,cmd | grep -c "[p]ython3" ; date -u
