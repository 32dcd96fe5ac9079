#!/usr/bin/env bash
# Issue 33 (branch `wire`): Nsight Compute's runs under the supervisor (a `Job` in its own process
# group, killed and reaped at its time limit), and a GPU held only through its gate.
#   1. `cudal1 profile` of one task's reference and solutions: profiles come back as before
#      (kernels with their shares); the log shows each run's hold of the GPU through its gate
#      ("a device held alone outside the evaluations is let go").
#   2. The same with `--profile-timeout 2 --force`: every run is cut with "did not end within 2s",
#      and afterwards no ncu and no profiled driver of this run is left (pgrep, by our scratch).
#   3. `optimize --profile` (1 round, 2 samples, the embedded model on the GPU): the run ends with
#      its summary (a profile waits for the engine's timed evaluations on the same GPU, never runs
#      beside them, and no hold is left behind).
# On the GPU machine, from the repository root:
#   bash bench/gpu_wire.sh            (decompresses .carry/cudal1-new.xz to .carry/cudal1-new)
#   bash bench/gpu_wire.sh PATH       (a cudal1 binary)
# Well under 10 minutes; everything goes to $OUT (wire.log and the JSON lines).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if [ -n "${1:-}" ]; then
  B=$(realpath "$1")
else
  unpack_missing .carry/cudal1-new.xz .carry/cudal1-new
  B=$(realpath .carry/cudal1-new)
fi
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O"
export CUDAL1_PYTHON=${CUDAL1_PYTHON:-$(command -v python3)}
export CUDAL1_WORK_DIR=${CUDAL1_WORK_DIR:-$O/work}
mkdir -p "$CUDAL1_WORK_DIR"
DB=$O/wire.db
T=${TASK:-7_Swish_Activation}
exec > >(tee -a "$O/wire.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; command -v ncu; ncu --version | tail -1

summary() {
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    name = r["program"].rsplit("/", 1)[-1]
    if "error" in r:
        print(f"  {name:<16} not profiled: {r['error'][:300]}")
    else:
        p = r["profile"]
        print(f"  {name:<16} {p['launches']} launches, {len(p['kernels'])} kernels, reused={r['reused']}")
PY
}

echo "== 1. profiles"
RUST_LOG=cudal1_eval=debug timeout -s INT -k 20 240 "$B" profile "tasks/level1/$T.py" solutions/level1/"$T"/*.py \
  --db "$DB" --force --json > "$O/profile.jsonl" 2> "$O/profile.stderr"
echo "exit $?"
summary "$O/profile.jsonl"
echo "device holds let go: $(grep -c 'a device held alone outside the evaluations is let go' "$O/profile.stderr")"

echo "== 2. a time limit of 2 s"
timeout -s INT -k 20 120 "$B" profile "tasks/level1/$T.py" --db "$DB" --force --profile-timeout 2 --json > "$O/timeout.jsonl"
echo "exit $? (1 expected: a program not profiled)"
summary "$O/timeout.jsonl"
sleep 1
left=$(pgrep -af "cudal1_runner.profile|$CUDAL1_WORK_DIR" | grep -v pgrep || true)
echo "left running: ${left:-nothing}"

echo "== 3. optimize --profile"
timeout -s INT -k 60 360 "$B" optimize "tasks/level1/$T.py" --llm-device cuda:0 --temperature 0.5 --rounds 1 --samples 2 \
  --max-tokens 512 --device cuda --seed 1 --db "$DB" --out "$O/opt" --json --profile > "$O/optimize.json"
echo "exit $?"
python3 - "$O/optimize.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    s = json.loads(line)
    print("  totals:", s.get("totals"))
PY
date -u
