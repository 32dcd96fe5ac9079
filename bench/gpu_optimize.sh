#!/usr/bin/env bash
# `cudal1 optimize` on the GPU (issue 5): 3 rounds of 2 samples on three bundled tasks with
# scripted replies (bench/scripted_llm.py, bench/optimize/script.json) that get faster each
# round; then, when the embedded model is installed, one round with no LLM flags at all.
# On the GPU machine, from the repository root:  bash bench/gpu_optimize.sh .carry/cudal1
set -u
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
W=$(mktemp -d)
mkdir -p "$O" "$W/suite/level1"
export CUDAL1_PYTHON=$(command -v python3)
exec > >(tee "$O/optimize.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in $(python3 -c 'import json; [print(t["task"]) for t in json.load(open("bench/optimize/script.json"))["tasks"]]'); do
  cp "$t" "$W/suite/level1/"
done
PORT=${PORT:-18765}
python3 bench/scripted_llm.py bench/optimize/script.json --port "$PORT" --log "$O/optimize_requests.jsonl" &
SERVER=$!
sleep 1
echo "== scripted: 3 rounds x 2 samples on $(ls "$W/suite/level1" | tr '\n' ' ')"
/usr/bin/time -f "scripted optimize: %e s" "$B" optimize "$W/suite" --llm-url "http://127.0.0.1:$PORT/v1" --model scripted \
  --rounds 3 --samples 2 --device cuda --out "$W/out" --db "$W/optimize.db" --json > "$O/optimize.jsonl"
echo "exit $?"
kill $SERVER
python3 bench/optimize_report.py "$O/optimize.jsonl"
for f in "$W"/out/level1/*/report.md; do echo "---- $f"; cat "$f"; done
if [ "${EMBEDDED:-1}" = 1 ]; then
  echo "== embedded model, no LLM flags: 1 round of 2 samples on 8_GELU_Tanh_Formula"
  /usr/bin/time -f "embedded optimize: %e s" "$B" optimize tasks/level1/8_GELU_Tanh_Formula.py --rounds 1 --samples 2 --device cuda \
    --out "$W/embedded" --db "$W/embedded.db" --json > "$O/embedded.jsonl"
  echo "exit $?"
  python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(json.dumps({"llm": r["llm"], "stop": r["stop_text"], "totals": r["totals"], "samples": [{k: s[k] for k in ("outcome", "reason", "verdict", "completion_tokens")} for s in r["samples"]]}, indent=1))' "$O/embedded.jsonl"
fi
date -u
