#!/usr/bin/env bash
# Load on `cudal1 serve` on this machine's CPU: starts it over the CPU suite with a worker inside,
# runs bench/serve_load.py against it and prints its JSON (p50/p99 latency, throughput, jobs).
#   bash bench/serve_load.sh [CLIENTS] [SECONDS] [PROGRAMS]     (default 16 60 40)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/cudal1}
CLIENTS=${1:-16}; SECONDS_=${2:-60}; PROGRAMS=${3:-40}
DIR=$(mktemp -d); PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN" serve --suite tests/suite-cpu/tasks --listen 127.0.0.1:$PORT --device cpu --mode correctness \
  --db "$DIR/serve.db" --cache-dir "$DIR/cache" >"$DIR/serve.log" 2>&1 &
PID=$!
trap 'kill -INT $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.2; done
python3 bench/serve_load.py --url "http://127.0.0.1:$PORT" --clients "$CLIENTS" --duration "$SECONDS_" --programs "$PROGRAMS"
echo "serve_load: store and log in $DIR" >&2
