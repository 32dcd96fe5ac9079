#!/usr/bin/env bash
# Issue 30's rollout throughput: the model worker's sampler against the one of the 2026-11-24
# record (docs/bench/2026-11-24-gpu-session9), in one process on one GPU, with SmolLM2-135M's
# shape and random weights (bench/gpu_generate.py says what is measured). From the repository
# root on the GPU machine (python3, torch, transformers; peft for the LoRA part; no network):
#   here, once:  mkdir -p .carry && git show 06526da:python/cudal1_model/sampling.py > .carry/old_sampling.py
#   there:       bash bench/gpu_generate.sh          (carry [".carry"]; about 6 minutes)
# PARTS picks what runs (default "tests plain lora"; one call of 10 minutes holds all three):
#   tests  the CUDA tests of the decoders (python/cudal1_model/tests/test_decoders.py), if pytest
#   plain  8, 16, 64 and 256 rows without an adapter          -> $OUT/generate.json
#   lora   8, 16 and 256 rows with a rank-16 adapter on every linear layer, as the record's
#          policy had (needs peft), merged (the worker's choice on CUDA) and kept separate
#          (`speedup_merged_over_separate`)                   -> $OUT/generate-lora.json
# Extra arguments go to every gpu_generate.py run.
set -u
O=${OUT:-/tmp/cudal1-out}
OLD=${OLD:-.carry/old_sampling.py}
mkdir -p "$O"
[ -f "$OLD" ] || { echo "missing $OLD: git show 06526da:python/cudal1_model/sampling.py > $OLD"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
for part in ${PARTS:-tests plain lora}; do
  case $part in
  tests)
    if python3 -c "import pytest" 2>/dev/null; then
      (cd python && timeout 120 python3 -m pytest -q -p no:cacheprovider cudal1_model/tests/test_decoders.py 2>&1 | tail -3)
    else
      echo "tests: no pytest here"
    fi ;;
  plain)
    timeout 250 python3 bench/gpu_generate.py --old "$OLD" --out "$O/generate.json" "$@" \
      2>"$O/generate.log" >/dev/null
    echo "plain: exit $?"; grep '^{"code' "$O/generate.log" | cut -c1-260 ;;
  lora)
    if python3 -c "import peft" 2>/dev/null; then
      timeout 260 python3 bench/gpu_generate.py --old "$OLD" --lora 16 --shapes 2x4,2x8,32x8 \
        --old-reps 1 --out "$O/generate-lora.json" "$@" 2>"$O/generate-lora.log" >/dev/null
      echo "lora: exit $?"; grep '^{"code' "$O/generate-lora.log" | cut -c1-260
    else
      echo "lora: no peft here"
    fi ;;
  esac
done
for f in "$O"/generate*.json; do
  [ -f "$f" ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1], json.dumps(r['speedup_new_over_old']))" "$f"
done
