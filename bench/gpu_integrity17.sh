#!/usr/bin/env bash
# Issue 29 on a GPU machine, from the repository root, after a batch of hostile candidates:
# `.carry/cudal1-new.xz` (this tree) and `.carry/cudal1-prev.xz` (the build before, 3fbeeff).
#   bash bench/gpu_integrity17.sh                 (PARTS="prev_light new_cuda new_cpu")
#   PARTS="pytest new_cuda new_cpu solutions" bash bench/gpu_integrity17.sh   (no prev binary)
# pytest: python/tests/test_gpu.py; solutions: the bundled solutions/ in the full mode (the
# false-positive check; SOLUTIONS_BUDGET s of timing each, SOLUTIONS_LIMIT s in all, resumes from
# .carry/solutions.db when carried).
# 1. the build before on the light side-stream task (the hole, measured);
# 2. this build on the CUDA corpus and on the whole CPU corpus run with --device cuda (double
#    forks, prlimit on cudal1's processes, daemons, ...), each against its `# cudal1: expect=` line;
# 3. what is left afterwards: every python process and every zombie on the machine.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O" /tmp/bins
export CUDAL1_PYTHON=$(command -v python3)
unpack_carried /tmp/bins
exec > >(tee "$O/integrity.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; uname -r
left() {
  echo "-- processes left ($1): python, and zombies"
  ps -eo pid,ppid,stat,etime,cmd | awk 'NR==1 || /[p]ython/ || $3 ~ /^Z/' | grep -v "awk\|ps -eo" | head -20
  echo "python processes: $(pgrep -c python || true); zombies: $(ps -eo stat | grep -c '^Z' || true)"
}
run() { # name binary suite candidates [args...]
  local name=$1 bin=$2 suite=$3 cands=$4; shift 4
  echo "== $name: $bin eval --suite $suite --candidates $cands $*"
  local t0=$(date +%s)
  timeout -s INT -k 30 "${LIMIT:-240}" "/tmp/bins/$bin" eval --suite "$suite" --candidates "$cands" --device cuda \
    --budget "${BUDGET:-1}" --json --check-expectations --db "$O/$name.db" "$@" > "$O/$name.jsonl"
  echo "exit $? in $(( $(date +%s) - t0 )) s"
  python3 bench/window_table.py "$O/$name.jsonl" | grep -v "expect=\(exploit\|incorrect\|runtime_error\|compile_error\|timeout\)$" || true
  python3 - "$O/$name.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
missed = [r for r in rows if "verdict" in r and r.get("expect") and r["expect"]["verdict"] != r["verdict"]]
summary = [r for r in rows if "summary" in r]
print("verdicts:", sum(1 for r in rows if "verdict" in r), "expectations missed:", [(r["candidate"].split("/")[-1], r["verdict"], r.get("reason_class")) for r in missed])
if summary: print("counts:", json.dumps(summary[-1]["summary"]["counts"]))
PY
  checkpoint "$O/$name.db"
  gzip -f "$O/$name.jsonl"
  left "after $name"
}
left "before"
C=tests/adversarial/cuda
for part in ${PARTS:-prev_light new_cuda new_cpu}; do
  case $part in
    pytest) echo "== python/tests/test_gpu.py"
      timeout 200 python3 -m pytest python/tests/test_gpu.py -q -p no:cacheprovider 2>&1 | tail -15 ;;
    prev_light) run prev_light cudal1-prev $C/tasks $C/candidates --only level1/2_Light_Gelu_Scale ;;
    new_cuda) run new_cuda cudal1-new $C/tasks $C/candidates ;;
    new_cpu) run new_cpu_corpus_on_cuda cudal1-new tests/adversarial/tasks tests/adversarial/candidates ;;
    solutions) [ -f "$O/solutions.db" ] || { [ -f .carry/solutions.db ] && cp .carry/solutions.db "$O/solutions.db"; }
      BUDGET=${SOLUTIONS_BUDGET:-2} LIMIT=${SOLUTIONS_LIMIT:-300} run solutions cudal1-new tasks solutions ;;
    *) echo "unknown part $part" ;;
  esac
done
sleep 2; left "2 s after the last run"
date -u
