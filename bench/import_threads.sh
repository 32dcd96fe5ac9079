#!/usr/bin/env bash
# What `import torch` costs a runner, alone and as many start at once (the first wave of a
# correctness run), under the thread settings a runner could get. Uses a bytecode cache of its
# own (as runners do: PYTHONPYCACHEPREFIX), warmed first. From the repository root:
#   bash bench/import_threads.sh            # N=16 processes at once by default
set -u
N=${N:-$(nproc)}
export PYTHONPYCACHEPREFIX=/tmp/import-threads-bytecode
env -u PYTHONDONTWRITEBYTECODE python3 -c 'import torch' # warms the bytecode cache (the image may set PYTHONDONTWRITEBYTECODE)
export PYTHONDONTWRITEBYTECODE=1
variants=(
  ""
  "OPENBLAS_NUM_THREADS=1"
  "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1"
)
for v in "${variants[@]}"; do
  for i in 1 2 3; do
    env $v /usr/bin/time -f "alone [${v:-none}] %e s wall %U user %S sys" python3 -c 'import torch'
  done
  for rep in 1 2; do
  start=$(date +%s.%N)
  for i in $(seq "$N"); do env $v /usr/bin/time -a -o /tmp/import-threads-$i.txt -f "%e %U %S" python3 -c 'import torch' & done
  wait
  end=$(date +%s.%N)
  cat /tmp/import-threads-*.txt | python3 -c '
import sys
label, start, end = sys.argv[1:]
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
print(f"{len(rows)} at once [{label}]: all done in {float(end) - float(start):.2f} s; per process mean wall {sum(r[0] for r in rows) / len(rows):.2f} s, mean CPU {sum(r[1] + r[2] for r in rows) / len(rows):.2f} s")' "${v:-none}" "$start" "$end"
  rm -f /tmp/import-threads-*.txt
  done
done
# Threads alive right after the import, and whose they are.
python3 -c 'import torch, os; print("threads after import torch:", len(os.listdir("/proc/self/task")))'
OPENBLAS_NUM_THREADS=1 python3 -c 'import torch, os; print("threads after import torch, OPENBLAS_NUM_THREADS=1:", len(os.listdir("/proc/self/task")))'
python3 -c 'import numpy, os; print("threads after import numpy:", len(os.listdir("/proc/self/task"))); numpy.show_config()' 2>&1 | head -40
