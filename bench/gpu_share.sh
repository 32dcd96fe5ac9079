#!/usr/bin/env bash
# Issue 12: outputs handed to the reference on the device (CUDA IPC) against files, on the GPU.
#   1. the runner's GPU tests of the hand-over (exported outputs, the reference's checks of a
#      lying or forged claim, reveals);
#   2. the same candidates of the bundled suite judged twice by this binary: `--device-outputs 0`
#      (files, into a throw-away store) and the default (on the device, into DB); the wall time
#      of each pass and the phases of every candidate come back.
# On the GPU machine, from the repository root:  bash bench/gpu_share.sh BIN
# ONLY: the suite's tasks of the comparison (`--only` values, space-separated). LIMIT: seconds per
# pass. Everything comes back under $OUT: share.log, the runner tests' log and each pass's JSON.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O"
export CUDAL1_PYTHON=${CUDAL1_PYTHON:-$(command -v python3)}
DB=${DB:-$O/share.db}
LIMIT=${LIMIT:-200}
ONLY=${ONLY:-level1/12_LayerNorm_Explicit level1/15_Argmax_Over_Softmax}
exec > >(tee -a "$O/share.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc

echo "== the runner's GPU tests of outputs on the device"
(cd python && timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "device or matches_across or revealed") > "$O/share_tests.log" 2>&1
echo "exit $?"; tail -5 "$O/share_tests.log"

only=(); for t in $ONLY; do only+=(--only "$t"); done
for how in files device; do
  extra=(); db=$DB
  if [ "$how" = files ]; then extra=(--device-outputs 0); db=/tmp/share-files.db; rm -f "$db"*; fi
  echo "== $how: ${only[*]} (limit $LIMIT s)"
  start=$(date +%s.%N)
  timeout -s INT -k 60 "$LIMIT" "$B" eval --suite tasks --candidates solutions "${only[@]}" --device cuda --budget 1 --db "$db" --json "${extra[@]}" > "$O/share_$how.jsonl"
  echo "exit $? after $(python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" "$start") s"
  python3 - "$O/share_$how.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "summary" in r:
        print("summary:", json.dumps(r["summary"].get("counts", r["summary"]))[:300])
        continue
    phases = (r.get("measurements") or {}).get("phases_ms") or {}
    print(f"{r['task']:<32} {r['candidate'][-28:]:<28} {r['verdict']:<10} {r['duration_ms'] / 1000:6.1f} s {json.dumps({k: round(v / 1000, 1) for k, v in phases.items()})}")
PY
done
checkpoint "$DB" 2>/dev/null
date -u
