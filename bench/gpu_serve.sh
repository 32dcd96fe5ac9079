#!/usr/bin/env bash
# cudal1 serve on this machine's GPU, answering a verl-shaped client (cudal1_rl.verl's
# compute_score_async) and a TRL-shaped client (cudal1_rl.trl's reward function) over the bundled
# solutions: throughput and p50/p99 latency. Then two `cudal1 worker` processes share one
# PostgreSQL queue: every job done once, none twice. Writes JSON, logs and the SQLite store under
# $OUT. At most ~8 minutes.
#   bash bench/gpu_serve.sh BIN
# PostgreSQL: $PG_BIN (a folder with initdb, pg_ctl, postgres), else $PG_TAR (default .carry/pg.tar.xz) from
# bench/pack_postgres.sh (unpacked here), else the machine's own; without any the PG part is
# skipped with a message. DEVICE=cpu SCALE=0.002 TASK_FILTER='11_Softmax' tries the logic on a CPU.
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
B=$(realpath "${1:-.carry/cudal1}")
O=${OUT:-/tmp/cudal1-out}
DEVICE=${DEVICE:-cuda}
mkdir -p "$O"
export CUDAL1_PYTHON=${CUDAL1_PYTHON:-$(command -v python3)}
export CUDAL1_SERVE_TOKEN=${CUDAL1_SERVE_TOKEN:-bench-token}
exec > >(tee "$O/gpu_serve.log") 2>&1
date -u
[ "$DEVICE" = cpu ] || nvidia-smi --query-gpu=name,memory.total --format=csv
SCALE_ARGS=(); [ -n "${SCALE:-}" ] && SCALE_ARGS=(--scale "$SCALE")
EVAL_ARGS=(--budget "${BUDGET:-1}" "${SCALE_ARGS[@]}")

echo "== part 1: serve with a worker on $DEVICE; verl- and TRL-shaped clients"
P=$(port); URL=http://127.0.0.1:$P
"$B" serve --suite tasks --listen 127.0.0.1:$P --device "$DEVICE" --mode full "${EVAL_ARGS[@]}" \
  --db "$O/serve.db" >"$O/serve.log" 2>&1 &
S=$!
if wait_up "$URL" $S; then
  timeout "${CLIENT_SECONDS:-330}" python3 bench/gpu_serve_clients.py --url "$URL" --out "$O/serve_clients.json" --seconds "$(( ${CLIENT_SECONDS:-330} - 40 ))" || echo "error: the clients failed (status $?)"
else
  echo "error: serve did not start"; tail -20 "$O/serve.log"
fi
curl -s -H "Authorization: Bearer $CUDAL1_SERVE_TOKEN" "$URL/metrics" > "$O/serve_metrics.txt" 2>/dev/null || true
stop $S

echo "== part 2: two workers sharing one PostgreSQL queue"
PGB=${PG_BIN:-}
PG_TAR=${PG_TAR:-.carry/pg.tar.xz}
if [ -z "$PGB" ] && [ -f "$PG_TAR" ]; then
  mkdir -p /tmp/cudal1-pg && tar -C /tmp/cudal1-pg -xJf "$PG_TAR" && . /tmp/cudal1-pg/pg/env.sh && PGB=$PG_BIN
fi
if [ -z "$PGB" ]; then
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && PGB=$d; done
fi
if [ -z "$PGB" ] || ! [ -x "$PGB/initdb" ]; then
  echo "skipped: no PostgreSQL server binaries (set PG_BIN, or carry PG_TAR, default .carry/pg.tar.xz, made by bench/pack_postgres.sh)"
  echo '{"skipped": "no PostgreSQL server binaries"}' > "$O/pg_queue.json"
  date -u; exit 0
fi
PGD=$(mktemp -d /tmp/cudal1-pgdata.XXXX); PGP=$(port)
RUN=(); if [ "$(id -u)" = 0 ]; then chown nobody "$PGD"; RUN=(su nobody -s /bin/bash -c); fi
pg() { if [ ${#RUN[@]} -gt 0 ]; then "${RUN[@]}" "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} $*"; else bash -c "$*"; fi; }
if ! pg "$PGB/initdb -A trust -U cudal1 --no-sync -E UTF8 --locale C -D $PGD/data" > "$O/pg_init.log" 2>&1 \
   || ! pg "$PGB/pg_ctl -D $PGD/data -l $PGD/log -w -o '-p $PGP -k $PGD -c listen_addresses=127.0.0.1 -c max_connections=200' start" >> "$O/pg_init.log" 2>&1; then
  echo "skipped: PostgreSQL from $PGB does not start here (missing libraries or a newer glibc?):"; tail -5 "$O/pg_init.log"
  echo "{\"skipped\": \"PostgreSQL from $PGB does not start\"}" > "$O/pg_queue.json"
  date -u; exit 0
fi
Q=postgres://cudal1@127.0.0.1:$PGP/postgres
CLASS=$([ "$DEVICE" = cpu ] && echo cpu || echo bench-gpu)
P=$(port); URL=http://127.0.0.1:$P
"$B" serve --suite tasks --listen 127.0.0.1:$P --queue "$Q" --gpu-class "$CLASS" "${EVAL_ARGS[@]}" >"$O/serve_pg.log" 2>&1 &
S=$!
for n in 1 2; do
  "$B" worker --queue "$Q" --device "$DEVICE" --gpu-class "$CLASS" --name "w$n" --exit-when-idle 15 --progress >"$O/worker$n.log" 2>&1 &
  eval W$n=$!
done
if wait_up "$URL" $S; then
  timeout "${PG_SECONDS:-240}" python3 bench/gpu_serve_clients.py --url "$URL" --out "$O/pg_clients.json" --part queue --mode correctness || echo "error: the queue client failed"
fi
wait $W1 $W2
stop $S
pg "$PGB/pg_ctl -D $PGD/data -m fast stop" >/dev/null 2>&1
python3 - "$O" <<'PY'
import json, re, sys
o = sys.argv[1]
c = json.load(open(f"{o}/pg_clients.json"))
workers = {}
for n in (1, 2):
    text = open(f"{o}/worker{n}.log").read()
    m = re.search(r"(\d+) claimed, (\d+) evaluated, (\d+) failed, (\d+) given back, (\d+) dropped as second results", text)
    workers[f"w{n}"] = dict(zip(["claimed", "evaluated", "failed", "given_back", "dropped"], map(int, m.groups()))) if m else {"log": text[-500:]}
done = sum(w.get("evaluated", 0) + w.get("failed", 0) for w in workers.values())
report = {"jobs": len(c["jobs"]), "pending": c["pending"], "workers": workers, "judged_in_all": done,
          "both_worked": all(w.get("evaluated", 0) > 0 for w in workers.values()),
          "no_duplicates": done == len(c["jobs"]) and all(w.get("dropped", 1) == 0 for w in workers.values())}
json.dump(report, open(f"{o}/pg_queue.json", "w"), indent=1)
print(json.dumps(report))
PY
# A device call brings back at most 8 files: the servers' and workers' logs travel as one.
(cd "$O" && tar czf logs.tgz serve.log serve_pg.log worker1.log worker2.log pg_init.log 2>/dev/null && rm -f serve.log serve_pg.log worker1.log worker2.log pg_init.log)
date -u
