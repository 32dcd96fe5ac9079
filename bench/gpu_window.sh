#!/usr/bin/env bash
# Issue 29 item 1 on a GPU machine, from the repository root: work on a stream that does not wait
# for the caller's, against the spin queued before each timed call. `.carry/cudal1-new.xz` is this
# tree's build, `.carry/cudal1-prev.xz` the build before (OLD_ONLY restricts it to the light task).
# Each run's JSON rows and a table go to $OUT.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O" /tmp/bins
export CUDAL1_PYTHON=$(command -v python3)
unpack_carried /tmp/bins
exec > >(tee "$O/window.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
run() { # name binary suite candidates [args...]
  local name=$1 bin=$2 suite=$3 cands=$4; shift 4
  echo "== $name: $bin eval --suite $suite --candidates $cands $*"
  local t0=$(date +%s)
  timeout -s INT -k 30 "${LIMIT:-240}" "/tmp/bins/$bin" eval --suite "$suite" --candidates "$cands" --device cuda \
    --budget "${BUDGET:-1}" --json --check-expectations --db "$O/window.db" "$@" > "$O/$name.jsonl"
  echo "exit $? in $(( $(date +%s) - t0 )) s"
  python3 bench/window_table.py "$O/$name.jsonl"
}
C=tests/adversarial/cuda
if [ -x /tmp/bins/cudal1-prev ]; then
  run prev_light cudal1-prev $C/tasks $C/candidates --only level1/2_Light_Gelu_Scale
fi
run new_cuda cudal1-new $C/tasks $C/candidates
run new_sidestream cudal1-new bench/sidestream/tasks bench/sidestream/candidates
checkpoint "$O/window.db"
for f in "$O"/*.jsonl; do gzip -f "$f"; done
date -u
