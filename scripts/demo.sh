#!/usr/bin/env bash
# The main job: set up, then evaluate the bundled solutions against the bundled tasks (on the
# GPU when there is one, else the small CPU suite), printing verdicts, speedups and the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if .venv/bin/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  exec target/release/cudal1 eval --suite tasks --candidates solutions "$@"
else
  echo "demo: no GPU visible; evaluating the CPU suite"
  exec target/release/cudal1 eval --suite tests/suite-cpu/tasks --candidates tests/suite-cpu/candidates --device cpu --budget 1 "$@"
fi
