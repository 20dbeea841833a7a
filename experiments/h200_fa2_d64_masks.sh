#!/usr/bin/env bash
# SDPA flash's d64 masked step with and without a loop after it (bash experiments/h200_fa2_d64_masks.sh; about
# 4 minutes): Nsight Compute's full set with per-SASS stall samples of SDPA flash at d64 on one, two and four
# K/V steps a block (N 128, 256, 512; B8 H132), causal and not. At N 128 (session44/masks-d256/) the one masked
# step costs what the model charges; the development sets' N 256-1024 causal rows cost about half a step more
# per masked step, with FA2's warps waiting for instructions (no_inst) 30% of their life at N 512: whether that
# wait comes with the loop. Development shapes only. Run from the repository root with simpy's wheel in .whl/.
# Everything comes back in $OUT/results.tgz. Run once, in session 45, on an H100 (RUNS.md 232,
# experiments/results/h100/session45/fa2-masks/).
set -uo pipefail
source experiments/device_env.sh
source experiments/device_steps.sh
ncu_configs "flash_fwd_kernel" "$MMA_SYNC_COUNTS" "sdpa-flash 64 256 1 8 132" "sdpa-flash 64 256 0 8 132" \
  "sdpa-flash 64 512 1 8 132" "sdpa-flash 64 512 0 8 132" "sdpa-flash 128 256 1 8 132" "sdpa-flash 128 256 0 8 132"
pack_results 'ncu-*' gpu.txt summary.txt
finish
