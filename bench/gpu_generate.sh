#!/usr/bin/env bash
# Issue 30's rollout throughput: the model worker's sampler against the one of the 2026-11-24
# record (docs/bench/2026-11-24-gpu-session9), in one process on one GPU, with SmolLM2-135M's
# shape and random weights (bench/gpu_generate.py says what is measured). From the repository
# root on the GPU machine (python3, torch, transformers; peft for the LoRA part; no network):
#   here, once:  mkdir -p .carry && git show 06526da:python/cudal1_model/sampling.py > .carry/old_sampling.py
#   there:       bash bench/gpu_generate.sh          (carry [".carry"]; about 6 minutes)
# Writes $OUT/generate.json (no adapter) and, where peft is installed, $OUT/generate-lora.json
# (a rank-16 adapter on every linear layer, as the record's policy had), and runs the CUDA tests
# of the decoders first when pytest is there.
set -u
O=${OUT:-/tmp/cudal1-out}
OLD=${OLD:-.carry/old_sampling.py}
mkdir -p "$O"
[ -f "$OLD" ] || { echo "missing $OLD: git show 06526da:python/cudal1_model/sampling.py > $OLD"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
if python3 -c "import pytest" 2>/dev/null; then
  (cd python && timeout 300 python3 -m pytest -q -p no:cacheprovider cudal1_model/tests/test_decoders.py 2>&1 | tail -5)
fi
timeout 420 python3 bench/gpu_generate.py --old "$OLD" --out "$O/generate.json" "$@" 2>"$O/generate.log" >/dev/null
echo "no adapter: exit $?"; grep '^{"code' "$O/generate.log" | cut -c1-300
if python3 -c "import peft" 2>/dev/null; then
  timeout 420 python3 bench/gpu_generate.py --old "$OLD" --lora 16 --shapes 2x4,2x8,32x8 --old-reps 1 \
    --out "$O/generate-lora.json" "$@" 2>"$O/generate-lora.log" >/dev/null
  echo "LoRA 16: exit $?"; grep '^{"code' "$O/generate-lora.log" | cut -c1-300
fi
