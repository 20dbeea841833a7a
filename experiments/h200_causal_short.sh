#!/usr/bin/env bash
# Why SDPA's flash kernel (FA2) is slower on short causal sequences than the model, and than our v2: Nsight
# Compute's full set, details page and per-SASS-instruction counts and stall samples of both at N = 512
# (development shapes of the FA2 grid: bf16, batch 32; d64 x 32 heads causal and not, d128 x 16 heads causal),
# where the measured FA2 / our v2 time is 1.33 (d64 causal), 1.15 (d64) and 1.18 (d128 causal) against the
# model's 1.06-1.09 (bash experiments/h200_causal_short.sh; about 2 minutes on an H200). Read by
# `python3 -m flashsim.experiments.ncu_regions --sections`. Run from the repository root with simpy's wheel in
# .whl/ and the cubins built (flashsim kernels build --out build/kernels --arch sm_90a). Everything comes back in
# $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
ncu_configs "flash_fwd_kernel|flashsim_v2" "$MMA_SYNC_COUNTS" "sdpa-flash 64 512 1 32 32" "v2 64 512 1 32 32" \
  "sdpa-flash 64 512 0 32 32" "v2 64 512 0 32 32" "sdpa-flash 128 512 1 32 16" "v2 128 512 1 32 16"
cd "$OUT" && tar czf results.tgz --ignore-failed-read ./*.txt && rm -f ncu-*.txt
cd - > /dev/null
finish
