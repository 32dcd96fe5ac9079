#!/usr/bin/env bash
# Issue 31, "where a program's time goes": the own-kernel share (`eval --own-share`) on one GPU
# with Nsight Compute, over the bundled solutions (CUDA ones should be near 100% own, PyTorch-only
# ones 0%) and over a slice of CUDA-L1's release.
#
# On the GPU machine (python3 + torch + nvcc + ncu, no cargo), from the repository root, with this
# tree's binary carried as .carry/cudal1-new.xz, CUDA-L1's release as .carry/h100.json and a
# KernelBench checkout as .carry/KernelBench (its names for the release's rows):
#   bash bench/gpu_own_share.sh                       (PARTS="solutions release")
#   PARTS=release ROWS=40 bash bench/gpu_own_share.sh
# MODE=correctness profiles each correct candidate without timing it first (faster; no speedups).
# Each part is cut by `timeout -s INT` (LIMIT s, default 520); the stores live in $DB_DIR (kept
# between calls on a warm machine), so running the same command again resumes: evaluations,
# profiles and shares already stored are reused. $OUT gets at most 5 files: own_share.log (the
# tables), <part>.jsonl.gz and stores.tar.gz.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
O=${OUT:-/tmp/cudal1-out}
DB_DIR=${DB_DIR:-/tmp/cudal1-own}
mkdir -p "$O" "$DB_DIR" /tmp/bins
export CUDAL1_PYTHON=${CUDAL1_PYTHON:-$(command -v python3)}
export CUDAL1_CACHE_DIR=${CUDAL1_CACHE_DIR:-/tmp/cudal1-own-cache}
unpack .carry/cudal1-new.xz /tmp/bins/cudal1-new
B=/tmp/bins/cudal1-new
exec > >(tee -a "$O/own_share.log") 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
command -v ncu nvcc c++filt; ncu --version | tail -1

table() { # jsonl: one line per candidate: task, candidate, verdict, speedup, own share, kernels
  python3 - "$1" <<'PY'
import json, sys
rows, shares, summary = {}, {}, None
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "summary" in r:
        summary = r["summary"]
    elif "own_share_of" in r:
        shares[r["own_share_of"]["id"]] = r
    elif "verdict" in r:
        rows[r.get("id")] = r
print(f"{'task':<44} {'candidate':<26} {'verdict':<14} {'speedup':>8} {'own':>6}  own/library kernels (top)")
for id_, r in rows.items():
    s = shares.get(id_, {})
    sp = r.get("speedup") or {}
    speed = f"{sp['median']:.2f}x" if sp.get("median") else "-"
    own = s.get("own_share")
    share = f"{own * 100:.0f}%" if own is not None else ("err" if "own_share_error" in s else "-")
    k = s.get("own_kernels") or {}
    kernels = k.get("kernels") or []
    n_own = sum(1 for x in kernels if x["origin"] == "own")
    n_claim = sum(1 for x in kernels if x["origin"] == "library_name")
    top = kernels[0]["name"][:50] + f" ({kernels[0]['origin']})" if kernels else s.get("own_share_error", "")[:80]
    if k.get("profiled") is False:
        top = "builds no kernel: 0 without profiling"
    extra = f" [{n_claim} named like a library's]" if n_claim else ""
    cand = "/".join(r["candidate"].split("/")[-2:])[-26:]
    print(f"{r['task'][:44]:<44} {cand:<26} {r['verdict']:<14} {speed:>8} {share:>6}  {n_own}/{len(kernels) - n_own}{extra} {top}")
    if k and k.get("profiled_ms_per_call") is not None and r.get("candidate_ms"):
        ratio = k["profiled_ms_per_call"] / r["candidate_ms"]
        if ratio < 0.05 and r["candidate_ms"] > 0.5:
            print(f"{'':<44}   profiled kernel time {k['profiled_ms_per_call']:.3f} ms/call against {r['candidate_ms']:.3f} ms timed: ran differently under ncu?")
if summary:
    print("summary own_share:", json.dumps(summary.get("own_share")), "counts:", json.dumps(summary.get("counts")))
PY
}

part() { # name args...
  local name=$1; shift
  echo "== $name: cudal1 eval $* --own-share (limit ${LIMIT:-520} s)"
  local t0=$(date +%s)
  timeout -s INT -k 60 "${LIMIT:-520}" "$B" eval "$@" --device cuda --budget "${BUDGET:-1}" ${MODE:+--mode "$MODE"} --json --own-share \
    --db "$DB_DIR/$name.db" > "$O/$name.jsonl"
  echo "exit $? in $(( $(date +%s) - t0 )) s"
  table "$O/$name.jsonl"
  checkpoint "$DB_DIR/$name.db"
  gzip -f "$O/$name.jsonl"
}

for p in ${PARTS:-solutions release}; do
  case $p in
    solutions) part solutions --suite tasks --candidates solutions ;;
    release) part release --from cuda-l1 .carry/h100.json --suite .carry/KernelBench --limit "${ROWS:-40}" ;;
    *) echo "unknown part $p" ;;
  esac
done
tar -czf "$O/stores.tar.gz" -C "$DB_DIR" .
date -u
