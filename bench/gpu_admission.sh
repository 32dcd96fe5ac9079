#!/usr/bin/env bash
# Issue 34, admission by memory, on a GPU machine, from the repository root, with this tree's
# binary in `.carry/cudal1-new.xz` (here: `cargo build --release -p cudal1-cli && mkdir -p .carry &&
# xz -3 -c target/release/cudal1 > .carry/cudal1-new.xz`; carry `.carry`):
#   bash bench/gpu_admission.sh          # SIZE_GIB=8 for a tighter squeeze, CANDIDATES=4 for fewer; results under $OUT
# A task whose one input is SIZE_GIB GiB (default 4: a reference and a candidate hold about 20 GiB
# together), six correct candidates of it, correctness mode with six lanes: without admission the
# lanes' processes together need far more than the GPU has (out_of_memory rows, or a failed
# reference); with it, jobs wait for memory. The same batch with one lane must give the same
# verdicts. Also the runner's GPU test of `device_peak_bytes`. Prints each run's verdicts, its
# counts (waited_for_memory, ran_alone_for_memory) and wall time; raw rows under $OUT.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O" /tmp/bins
export CUDAL1_PYTHON=$(command -v python3)
unpack .carry/cudal1-new.xz /tmp/bins/cudal1
exec > >(tee "$O/admission.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
(cd python && timeout 300 python3 -m pytest -q tests/test_gpu.py -k "device_peak or hello_lists or handed_over" 2>&1 | tail -3)

W=/tmp/admission; rm -rf "$W"; mkdir -p "$W/tasks/level1" "$W/cands/level1/1_Big_Scale"
N=$(( ${SIZE_GIB:-4} << 28 ))  # float32 elements
cat > "$W/tasks/level1/1_Big_Scale.py" <<PY
import torch
import torch.nn as nn

n = $N


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
PY
for i in $(seq 1 "${CANDIDATES:-6}"); do
  printf '# cudal1: expect=correct\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x + x  # %s\n' "$i" > "$W/cands/level1/1_Big_Scale/c$i.py"
done
run() { # name lanes
  echo "== $1: --lanes $2"
  local t0=$(date +%s)
  timeout -s INT -k 30 "${LIMIT:-240}" /tmp/bins/cudal1 eval --suite "$W/tasks" --candidates "$W/cands" --device cuda \
    --mode correctness --lanes "$2" --json --check-expectations --db "$O/$1.db" > "$O/$1.jsonl"
  echo "exit $? in $(( $(date +%s) - t0 )) s"
  python3 - "$O/$1.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
summary = rows.pop()["summary"] if rows and "summary" in rows[-1] else {}
print("verdicts:", dict(collections.Counter(f"{r['verdict']}/{r.get('reason_class')}" for r in rows)))
c = summary.get("counts", {})
print("counts:", {k: c.get(k) for k in ["evaluated", "waited_for_memory", "ran_alone_for_memory", "reference_failures", "host_failures"]})
for r in rows:
    p = r.get("measurements", {}).get("phases_ms", {})
    print(f"  {r['candidate'].split('/')[-1]:8} {r['verdict']:14} memory_wait {p.get('memory_wait', 0):8.0f} ms  warnings {[w['class'] for w in r.get('warnings', [])]}")
PY
}
run lanes6 6
run lanes1 1
echo "-- processes left: python, and zombies"
ps -eo pid,ppid,stat,etime,cmd | awk 'NR==1 || /[p]ython/ || $3 ~ /^Z/' | grep -v "awk\|ps -eo" | head -20
