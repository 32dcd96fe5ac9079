#!/usr/bin/env bash
# Session 23's last device call (issues 31 and 34), from the repository root with .carry holding
# cudal1-new.xz (this tree), h100.json and KernelBench/:
# 1. the own-kernel share of the bundled CUDA solutions of levels 2-3 (their tasks only), after
#    the profile fix (e830cde): their profiles load the evaluation's build;
# 2. the release rows whose full-mode verdict differed from session 18's correctness-mode one-lane
#    rows (three timed_output_mismatch RNNs and the seed flipper level1/13), in the full mode with
#    --lanes 1 and with the default lanes.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
O=${OUT:-/tmp/cudal1-out}; mkdir -p "$O" /tmp/bins
exec > >(tee -a "$O/session23.log") 2>&1
unpack .carry/cudal1-new.xz /tmp/bins/cudal1-new
B=/tmp/bins/cudal1-new
export CUDAL1_PYTHON=$(command -v python3) CUDAL1_CACHE_DIR=/tmp/cache-23
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
only=(); for t in level2/1_Gemm_Bias_QuickGELU level2/5_Scaled_Causal_Softmax level2/7_Gemm_LogSumExp level2/8_Conv2d_ChannelScale_Sigmoid level2/9_RMSNorm_Residual level2/10_SwiGLU_Gated_MLP level3/3_ResNet_BasicBlock; do only+=(--only "$t"); done
t0=$(date +%s)
timeout -s INT -k 30 "${OWN_LIMIT:-300}" $B eval --suite tasks --candidates solutions "${only[@]}" --device cuda --mode correctness --own-share --json --db /tmp/own23.db > "$O/own23.jsonl"
echo "own share: exit $? in $(( $(date +%s) - t0 )) s"
checkpoint /tmp/own23.db
rows=(); for t in level1/13_Matmul_for_symmetric_matrices level3/33_VanillaRNN level3/34_VanillaRNNHidden level3/40_GRUHidden; do rows+=(--only "$t"); done
for lanes in one default; do
  extra=(); [ $lanes = one ] && extra=(--lanes 1)
  t0=$(date +%s)
  timeout -s INT -k 30 "${ROW_LIMIT:-110}" $B eval --from cuda-l1 .carry/h100.json --suite "$(realpath .carry/KernelBench)" "${rows[@]}" --device cuda --budget 0.5 --prefetch true "${extra[@]}" --json --db /tmp/rows-$lanes.db > "$O/rows-$lanes.jsonl"
  echo "rows ($lanes lane(s)): exit $? in $(( $(date +%s) - t0 )) s"
done
cd "$O" && gzip -f *.jsonl && ls -la
