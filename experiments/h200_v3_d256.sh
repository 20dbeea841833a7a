#!/usr/bin/env bash
# Where our v3 spends its cycles at d256, causal and not (development shapes: bf16, 16 heads, N = 8192 x batch
# 2 and N = 2048 x batch 8): Nsight Compute's full set, its details page and its per-SASS-instruction counts
# and stall samples (bash experiments/h200_v3_d256.sh; about 4 minutes on an H200). Run from the repository
# root with simpy's wheel in .whl/ and the cubins built (flashsim kernels build --out build/kernels --arch
# sm_90a). Everything comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
status=0
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
ncu_configs "^v3_" "$WGMMA_COUNTS" "v3 256 8192 0 2 16" "v3 256 8192 1 2 16" "v3 256 2048 1 8 16" "v3 256 2048 0 8 16"
cd "$OUT" && tar czf results.tgz --ignore-failed-read ./*.txt && rm -f ncu-*.txt
cd - > /dev/null
finish
