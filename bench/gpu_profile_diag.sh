#!/usr/bin/env bash
# Why a profile of some bundled CUDA solutions takes ~60 s without ncu (issue 31): publish their
# builds with a correctness evaluation, then run the profiling driver by hand with stack dumps
# every 15 s, and time `cudal1 profile` on each. Carry [".carry"] (cudal1-new.xz).
set -u
O=${OUT:-/tmp/cudal1-out}; mkdir -p "$O"
exec > >(tee -a "$O/profile_diag.log") 2>&1
B=/tmp/cudal1-diag; [ -x $B ] || { xz -dc .carry/cudal1-new.xz > $B && chmod +x $B; }
export CUDAL1_PYTHON=$(command -v python3) CUDAL1_CACHE_DIR=/tmp/cache-diag
S=${SOLUTIONS:-level2/1_Gemm_Bias_QuickGELU level1/16_Reverse_Cumsum}
for s in $S; do
  ( $B eval --task tasks/$s.py --candidate solutions/$s/fast_cuda.py --device cuda --mode correctness --db /tmp/diag-eval.$(basename $s).db --json > /tmp/diag-eval.$(basename $s).json 2>&1 ) &
  pids="${pids:-} $!"
done
wait $pids  # not a bare `wait`: it would also wait for the tee above, which never ends
for s in $S; do python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if l.startswith('{\"')]; r=[x for x in r if 'verdict' in x][0]; print(r['task'], r['verdict'], {k: v for k, v in r['measurements'].items() if k in ('compile_ms','extension_ms')})" /tmp/diag-eval.$(basename $s).json; done
for e in /tmp/cache-diag/extensions/*/; do echo "== $e"; ls -la $e; cat $e/.cudal1-builds.json; echo; cat $e/.cudal1-built; echo; done
for s in $S; do
  E=$(dirname $(ls -d /tmp/cache-diag/extensions/*/cudal1_*$(echo $s | sed 's/level\([0-9]\)\/\([0-9]*\)_.*/l\1_\2_/')* | head -1))
  echo "== driver by hand: $s in $E"
  rm -rf /tmp/diag-work; mkdir -p /tmp/diag-work
  t0=$(date +%s.%N)
  (cd /tmp/diag-work && TMPDIR=/tmp/diag-work TORCH_EXTENSIONS_DIR=$E PYTHONPATH=$OLDPWD/python OPENBLAS_NUM_THREADS=1 timeout 150 python3 -c "
import faulthandler, sys, time
faulthandler.dump_traceback_later(12, repeat=True)
from cudal1_runner import extensions as x
orig = x._load_published
def lp(r):
    t = time.time(); m = orig(r); print('published record', r, 'loaded', m is not None, round(time.time() - t, 2), 's', file=sys.stderr); return m
x._load_published = lp
of = x._fingerprint
def fp(b):
    f = of(b); print('fingerprint', f, 'known', f in x._published, 'published', list(x._published), file=sys.stderr); return f
x._fingerprint = fp
from cudal1_runner import profile
profile.main(['--task', '$OLDPWD/tasks/$s.py', '--candidate', '$OLDPWD/solutions/$s/fast_cuda.py', '--status', '/tmp/diag-work/status.json'])
")
  echo "rc $? in $(python3 -c "import sys,time;print(round(time.time()-float(sys.argv[1]),2))" $t0) s; status $(cat /tmp/diag-work/status.json)"; ls /tmp/diag-work
done
for s in $S; do
  for mode in --dry-run "" ; do
    t0=$(date +%s.%N)
    $B profile tasks/$s.py solutions/$s/fast_cuda.py --no-reference $mode --db /tmp/diag-prof.db -v 2>&1 | tail -4
    echo "profile $mode $s: $(python3 -c "import sys,time;print(round(time.time()-float(sys.argv[1]),2))" $t0) s"
  done
done
