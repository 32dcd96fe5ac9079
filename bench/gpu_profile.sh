#!/usr/bin/env bash
# Issue 15 part 3: Nsight Compute profiles on one GPU, and whether profiles in the prompt change
# what a fixed LLM writes.
#   1. `cudal1 profile` on every level-1 task of the bundled suite: the reference and each of its
#      solutions (`solutions/level1/<task>/*.py`), stored in $O/profile.db; the first pass checks
#      that ncu can read the counters here at all (KINDS.md: Firecracker yes, gVisor no).
#   2. The same `optimize` run twice per task, once plain and once with `--profile`, same seed,
#      same LLM (the embedded SmolLM2-135M unless LLM_URL/LLM_MODEL name a server), same rounds
#      and samples; the JSON summaries give each run's correct samples and best speedup.
#   3. `cudal1 report` of the store, with the profiles section.
# On the GPU machine, from the repository root:  bash bench/gpu_profile.sh .carry/cudal1
# Each pass is cut by `timeout -s INT`; rerunning resumes (profiles and runs are stored).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O"
export CUDAL1_PYTHON=${CUDAL1_PYTHON:-$(command -v python3)}
DB=${DB:-$O/profile.db}
TASKS=${TASKS:-"7_Swish_Activation 8_GELU_Tanh_Formula 11_Softmax_Explicit 5_Diagonal_Matmul"}
ROUNDS=${ROUNDS:-2}
SAMPLES=${SAMPLES:-4}
MAX_TOKENS=${MAX_TOKENS:-1024}
LLM=()
if [ -n "${LLM_URL:-}" ]; then LLM=(--llm-url "$LLM_URL" --model "${LLM_MODEL:?set LLM_MODEL to the model name of the server}"); else LLM=(--llm-device cuda:0 --temperature "${TEMPERATURE:-0.5}"); fi
exec > >(tee -a "$O/profile.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; command -v ncu; ncu --version | tail -1

echo "== 1. profiles (limit ${PROFILE_LIMIT:-200} s in all)"
end=$(( $(date +%s) + ${PROFILE_LIMIT:-200} ))
for t in $TASKS; do
  left=$(( end - $(date +%s) )); [ "$left" -gt 10 ] || break
  timeout -s INT -k 20 "$left" "$B" profile "tasks/level1/$t.py" solutions/level1/"$t"/*.py --db "$DB" --json > "$O/profile-$t.jsonl"
  echo "$t: exit $?"
  python3 - "$O/profile-$t.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "error" in r:
        print(f"  {r['program'].rsplit('/', 1)[-1]:<16} not profiled: {r['error'][:300]}")
        continue
    print(f"  {r['program'].rsplit('/', 1)[-1]:<16} " + r["brief"].replace("\n", "\n" + " " * 19))
PY
done

echo "== 2. optimize with and without --profile (limit ${OPT_LIMIT:-300} s in all)"
end=$(( $(date +%s) + ${OPT_LIMIT:-300} ))
for t in $TASKS; do
  for mode in plain profile; do
    left=$(( end - $(date +%s) )); [ "$left" -gt 10 ] || break 2
    flag=(); [ "$mode" = profile ] && flag=(--profile)
    timeout -s INT -k 90 "$left" "$B" optimize "tasks/level1/$t.py" "${LLM[@]}" --rounds "$ROUNDS" --samples "$SAMPLES" --max-tokens "$MAX_TOKENS" \
      --device cuda --seed 1 --db "$DB" --out "$O/opt/$mode/$t" --json "${flag[@]}" > "$O/opt-$mode-$t.json"
    echo "$t $mode: exit $?"
  done
done
python3 - "$O" <<'PY'
import glob, json, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "opt-*.json"))):
    mode, task = os.path.basename(f)[4:-5].split("-", 1)
    for line in open(f):
        s = json.loads(line)
        t = s["totals"]
        best = s["best"]["speedup"] if s.get("best") else None
        rows.setdefault(task, {})[mode] = (t["samples"], t["valid"], t["correct"], best)
print(f"{'task':<28} {'mode':<8} samples with_code correct best")
for task, modes in rows.items():
    for mode, (n, v, c, b) in sorted(modes.items()):
        print(f"{task:<28} {mode:<8} {n:>7} {v:>9} {c:>7} {'-' if b is None else f'{b:.2f}x'}")
PY
grep -h "Nsight Compute" "$O"/opt/profile/*/replies/* 2>/dev/null | head -3

echo "== 3. report"
"$B" report --db "$DB" -o "$O/report.html"
checkpoint "$DB"
date -u
