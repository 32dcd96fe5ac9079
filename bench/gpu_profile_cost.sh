#!/usr/bin/env bash
# Where one Nsight Compute profile's time goes (issue 31): a bare PyTorch process against the same
# under ncu with one metric and with cudal1's six, then `cudal1 profile` of a bundled CUDA solution
# dry (no ncu), unconfined and confined. From the repository root on the GPU machine, carry
# [".carry"] with cudal1-new.xz. Output: $OUT/profile_cost.log.
set -u
O=${OUT:-/tmp/cudal1-out}; mkdir -p "$O"
exec > >(tee -a "$O/profile_cost.log") 2>&1
B=/tmp/cudal1-cost; [ -x $B ] || { xz -dc .carry/cudal1-new.xz > $B && chmod +x $B; }
export CUDAL1_PYTHON=$(command -v python3) CUDAL1_CACHE_DIR=${CUDAL1_CACHE_DIR:-/tmp/cache-new}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
cat > /tmp/cost.py <<'PY'
import time
t0 = time.time()
import torch
t1 = time.time()
x = torch.randn(2048, 2048, device="cuda"); torch.cuda.synchronize()
t2 = time.time()
for _ in range(3):
    y = torch.softmax(x @ x, 1)
torch.cuda.synchronize(); t3 = time.time()
torch.cuda.cudart().cudaProfilerStart(); y = torch.softmax(x @ x, 1); torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop(); t4 = time.time()
print(f"import {t1-t0:.2f} s, cuda init {t2-t1:.2f} s, warmup {t3-t2:.2f} s, profiled call {t4-t3:.2f} s")
PY
t() { local s=$(date +%s.%N); "$@" > /tmp/cost.out 2>&1; local rc=$?; grep -h "^import" /tmp/cost.out; echo "rc $rc, $(python3 -c "import sys,time;print(round(time.time()-float(sys.argv[1]),2))" $s) s: ${*:0:6}"; }
M6=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
for i in 1 2; do
  echo "== round $i"
  t python3 /tmp/cost.py
  t $NCU --target-processes all --profile-from-start off --clock-control none --csv --metrics gpu__time_duration.sum python3 /tmp/cost.py
  t $NCU --target-processes all --profile-from-start off --clock-control none --csv --metrics $M6 python3 /tmp/cost.py
  t $NCU --target-processes all --profile-from-start on --clock-control none --csv --metrics gpu__time_duration.sum python3 /tmp/cost.py
done
for s in ${SOLUTIONS:-level2/5_Scaled_Causal_Softmax level1/14_Max_Abs_Reduction}; do
  T=$(ls tasks/$s.py 2>/dev/null || ls tasks/$s/*.py | head -1); C=solutions/$s/fast_cuda.py
  echo "== $s"
  t $B profile "$T" "$C" --no-reference --dry-run --db /tmp/cost-dry.db
  t $B profile "$T" "$C" --no-reference --no-sandbox --db /tmp/cost-free.db
  t $B profile "$T" "$C" --no-reference --db /tmp/cost-conf.db
  t $B profile "$T" "$C" --no-reference --db /tmp/cost-conf.db --force
  t $B profile "$T" --db /tmp/cost-ref.db
done
