#!/usr/bin/env bash
# SDPA flash's masked K/V steps with no loop after them, and cuDNN at head dim 256 (bash
# experiments/h200_masks_d256.sh; about 7 minutes). No model runs here; development shapes only:
#   1. what SDPA's fused backends launch on the head-dim-256 development set (cuDNN's d256 tile, which
#      simulator/sdpa.py leaves open for want of shapes): sdpa-launches-dev-d256.json;
#   2. Nsight Compute's full set with per-SASS stall samples of cuDNN at two d256 development shapes
#      (B16 H16 N1024, B1 H8 N8192: the model 15-30% slow on both);
#   3. the same of SDPA flash on one Q tile per head (N 128, B8 H132, the per-tile set's shape), causal and
#      not, d64 (one K/V step, masked when causal) and d128 (two, both masked when causal): the masked steps'
#      code against the unmasked, with no loop to share the samples.
# Run from the repository root with simpy's wheel in .whl/. Everything comes back in $OUT/results.tgz.
set -uo pipefail
source experiments/device_env.sh
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())" >> "$OUT/gpu.txt"
step launches-d256 120 python3 -m flashsim.experiments.sdpa_launches --grid dev-d256 \
  --out "$OUT/sdpa-launches-dev-d256.json"
ncu_configs "cudnn" "$WGMMA_COUNTS" "sdpa-cudnn 256 1024 0 16 16" "sdpa-cudnn 256 8192 0 1 8"
ncu_configs "flash_fwd_kernel" "$MMA_SYNC_COUNTS" "sdpa-flash 128 128 1 8 132" "sdpa-flash 128 128 0 8 132" \
  "sdpa-flash 64 128 1 8 132" "sdpa-flash 64 128 0 8 132"
pack_results sdpa-launches-dev-d256.json 'ncu-*' '*.txt'
finish
