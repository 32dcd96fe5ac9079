#!/usr/bin/env bash
# Runs every test: the Rust workspace (unit and integration tests, which drive the real Python
# runner on the CPU) and the runner's own pytest suite. Sets up first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CUDAL1_PYTHON="$PWD/.venv/bin/python"
# The code's shape first: formatted as rustfmt.toml says, and no clippy warning (the workspace's
# lints in Cargo.toml). `cargo fmt` / `cargo clippy --fix` put most of it right.
echo "test: cargo fmt --check, cargo clippy -D warnings"
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  command -v rustup >/dev/null || { echo "error: the tests need cargo fmt and cargo clippy: install them" >&2; exit 1; }
  rustup component add rustfmt clippy
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release --quiet -- -D warnings 2>&1
echo "test: cargo test"
cargo test --workspace --release 2>&1
# Two runs: each folder has its own conftest.py, and one pytest process would import only one.
echo "test: pytest python/tests (the runner)"
.venv/bin/python -m pytest python/tests -q -p no:cacheprovider 2>&1
echo "test: pytest python/cudal1_model/tests (the model worker: embedded LLM and training)"
.venv/bin/python -m pytest python/cudal1_model/tests -q -p no:cacheprovider 2>&1
echo "test: pytest python/cudal1_rl/tests (the RL engines' adapters and reward paths against a real cudal1 serve)"
# -rs: a skipped engine test says why (CI sets CUDAL1_REQUIRE_ENGINES=1: a missing engine fails).
.venv/bin/python -m pytest python/cudal1_rl/tests -q -rs -p no:cacheprovider 2>&1
