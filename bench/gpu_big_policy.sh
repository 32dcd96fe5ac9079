#!/usr/bin/env bash
# Issue 30's realistic-size benchmark: `cudal1 train rl` with a randomly initialised Qwen2-style
# policy of 1.39B parameters (Qwen2.5-1.5B's shape with SmolLM2's tokenizer: bench/make_random_policy.py),
# with LoRA (rank 16, every linear layer) and with full fine-tuning (bfloat16 weights, AdamW, a
# frozen reference copy for the KL penalty), on one GPU (sampling, judging and training in turn)
# and, where `nvidia-smi -L` lists two, on two (`--overlap on`: the policy on cuda:0 samples the
# next step while cuda:1 judges). Each step samples 2 groups x 4 samples x 512 tokens of the
# synthetic train tasks and trains on all 8 (`--keep-flat-groups --max-refills 0`: a random policy
# writes no program, so every group is flat; kept at advantage 0 they cost a real step's update).
#
# From the repository root on the GPU machine (python3, torch, transformers, peft; no network),
# with carried in `.carry`: this tree's release build as `cudal1-new.xz`, and the embedded
# model's tokenizer alone as `smollm2-tokenizer/` (3.5 MB; made here once with
#   python3 bench/make_random_policy.py --tokenizer-only .carry/smollm2-tokenizer ).
#   bash bench/gpu_big_policy.sh      (carry [".carry/cudal1-new.xz", ".carry/smollm2-tokenizer"])
# Two calls back to back on one nvidia-h100-x2 lease keep each within ~5 minutes:
#   CONFIGS="lora1 full1" bash bench/gpu_big_policy.sh   then   CONFIGS="lora2 full2" bash ...
# (the second finds the checkpoint, and its table holds all four).
# CONFIGS picks what runs (default "lora1 full1", and "lora2 full2" with two GPUs): lora|full
# then 1 (one GPU) or 2 (two GPUs, overlapped). A configuration is stopped after LIMIT seconds
# (default 240; SIGINT: the step under way finishes and commits). STEPS (4), RL_GROUPS (2),
# GROUP_SIZE (4), MAX_TOKENS (512), SIZE (1.5b, or 0.5b) change the shape. The checkpoint, the
# tasks and the binary stay under WORK (/root/big) while the machine is warm, so a later call
# builds nothing again. A full fine-tuning run that runs out of memory is run again with
# `--micro-batch 1` (named FULL-mb1) and the table says so.
# Writes under $OUT: big_policy.md and big_policy.json (bench/big_policy_table.py: per
# configuration the median step after the first, and every step; every configuration measured on
# this machine, earlier calls' included) and big_policy.log (this call's).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
O=${OUT:-/tmp/cudal1-out}
W=${WORK:-/root/big}
TOK=${TOKENIZER:-.carry/smollm2-tokenizer}
# The embedded model saved by bench/gpu_ablation.sh on this machine holds the same tokenizer.
[ -f "$TOK/tokenizer.json" ] || [ ! -f /root/smol/tokenizer.json ] || TOK=/root/smol
SIZE=${SIZE:-1.5b}
STEPS=${STEPS:-4}
LIMIT=${LIMIT:-240}
mkdir -p "$O" "$W/runs"
exec > >(tee -a "$O/big_policy.log") 2>&1
export CUDAL1_PYTHON=$(command -v python3) HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
B=${BIN:-$W/cudal1}
if [ ! -x "$B" ]; then
  [ -f .carry/cudal1-new.xz ] || { echo "error: no .carry/cudal1-new.xz (this tree's release build, xz -9)"; exit 2; }
  unpack .carry/cudal1-new.xz "$B" || exit 2
fi
date -u
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
# The GPUs this call may use: those CUDA_VISIBLE_DEVICES names (numbers), else every one.
SMI_IDS=()
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  SMI_IDS=(-i "$CUDA_VISIBLE_DEVICES")
  GPUS=$(tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES" | grep -c .)
else
  GPUS=$(nvidia-smi -L | grep -c '^GPU ')
fi
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
"$B" --version

M=$W/policy-$SIZE
if [ ! -f "$M/config.json" ]; then
  [ -f "$TOK/tokenizer.json" ] || { echo "error: no tokenizer in $TOK: carry .carry/smollm2-tokenizer (see the top of this script)"; exit 2; }
  echo "== building the random $SIZE checkpoint ($(date -u +%T))"
  python3 bench/make_random_policy.py "$M" --size "$SIZE" --tokenizer "$TOK" --device cuda || exit 2
fi
du -sh "$M"
[ -d "$W/synth/train" ] || "$B" tasks synth "$W/synth" --scale gpu --train 4 --heldout 2 >/dev/null || exit 2

# Every configuration measured on this machine (this call's and earlier calls' of the lease): the
# table covers them all.
touch "$W/specs"
note() { grep -v "^$1=" "$W/specs" > "$W/specs.new"; echo "$1=$W/runs/$1:$2" >> "$W/specs.new"; mv "$W/specs.new" "$W/specs"; }

default="lora1 full1"
if [ "$GPUS" -ge 2 ]; then default="$default lora2 full2"; else echo "one GPU: the two-GPU configurations are left out"; fi
STOP=0
trap 'STOP=1; echo "interrupted: no further configuration starts"' INT TERM

# run NAME EXTRA...: one configuration; sets RC and the run's directory $W/runs/NAME.
run() {
  local name=$1; shift
  local r=$W/runs/$name
  rm -rf "$r"; mkdir -p "$r"
  local adapter=(--lora-r 16); case $name in full*) adapter=(--lora-r 0) ;; esac
  local devices=(--policy-device cuda:0 --device cuda:0 --overlap off)
  case $name in *2|*2-*) devices=(--policy-device cuda:0 --device cuda:1 --overlap on) ;; esac
  echo "== $name ($(date -u +%T)): ${adapter[*]} ${devices[*]} $*"
  nvidia-smi "${SMI_IDS[@]}" --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 > "$r/nvidia-smi.csv" 2>/dev/null &
  local smi=$!
  local t0=$SECONDS
  RUST_LOG="warn,cudal1_train::policy=info" timeout -s INT -k 90 "$LIMIT" "$B" train rl \
    --suite "$W/synth/train" --out "$r/run" --db "$r/train.db" --budget 1 --call-timeout 20 \
    --model-dir "$M" "${adapter[@]}" "${devices[@]}" \
    --steps "$STEPS" --groups "${RL_GROUPS:-2}" --group-size "${GROUP_SIZE:-4}" \
    --max-tokens "${MAX_TOKENS:-512}" --keep-flat-groups --max-refills 0 --save-every "$STEPS" \
    "$@" > "$r/stdout.json" 2> "$r/stderr.log"
  RC=$?
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  grep "policy loaded" "$r/stderr.log" > "$r/policy.txt"
  echo "exit $RC after $((SECONDS - t0)) s"; grep -v '^\[rl\] .*: \(generate\|evaluate\|train\|generate next\)$' "$r/stderr.log" | tail -n 12
  rm -rf "$r/run/checkpoints"  # gigabytes for full fine-tuning; the metrics are what counts
}

for name in ${CONFIGS:-$default}; do
  [ $STOP = 0 ] || break
  case $name in lora1|full1|lora2|full2) ;; *) echo "unknown configuration $name (lora1 full1 lora2 full2)"; continue ;; esac
  case $name in *2) [ "$GPUS" -ge 2 ] || { echo "$name needs two GPUs: left out"; continue; } ;; esac
  run "$name"
  if [ "$RC" != 0 ] && [ "${name#full}" != "$name" ] && grep -qi "out of memory" "$W/runs/$name/stderr.log"; then
    note "$name" "out of memory with --micro-batch 4 (the default)"
    [ $STOP = 0 ] || break
    run "$name-mb1" --micro-batch 1
    note "$name-mb1" "--micro-batch 1 after $name ran out of memory; exit $RC"
  elif [ "$RC" = 124 ]; then
    note "$name" "stopped after LIMIT=$LIMIT s (exit 124): the steps that finished"
  else
    note "$name" "exit $RC"
  fi
  # The table so far, after every configuration: a call cut short keeps what was measured.
  mapfile -t SPECS < "$W/specs"
  python3 bench/big_policy_table.py "$O/big_policy.json" "$O/big_policy.md" "${SPECS[@]}" > /dev/null
done
[ -f "$O/big_policy.md" ] && cat "$O/big_policy.md"
date -u
