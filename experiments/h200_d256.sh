#!/usr/bin/env bash
# Where our v2 and SDPA's flash spend a K/V step at d256 (development shape: bf16, batch 4 x 16 heads, N = 4096,
# non-causal), and the k-steps of 16-row warp tiles (64-row Q tiles of 4 warps, as at d256) in the ldmatrix /
# mma.sync sweep (bash experiments/h200_d256.sh; about 5 minutes on an H200). `flashsim calibrate --only
# ldsm_form` (every form and tile kernel at 4-16 warps per SM), then Nsight Compute's full set with executed
# instructions and stall samples per SASS instruction (ncu-{v2,sdpa-flash}-d256-n4096-c0{,-details,-sass}.txt,
# read by `python3 -m flashsim.experiments.ncu_regions`). Run from the repository root with simpy's wheel in
# .whl/ and the cubins built where nvcc is (flashsim kernels build --out build/kernels --arch sm_90a, and the
# microbenchmarks). Everything comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
step ldsm-form 240 python3 -m flashsim.cli calibrate --only ldsm_form --out-dir "$OUT/cal"
COUNTS=$MMA_SYNC_COUNTS,$SMEM_LD_COUNTS
ncu_configs "flash_fwd_kernel|flashsim_v2" "$COUNTS" "v2 256 4096 0 4 16" "sdpa-flash 256 4096 0 4 16"
cd "$OUT" && tar czf results.tgz --ignore-failed-read ./*.txt cal && rm -rf ncu-*.txt cal
cd - > /dev/null
finish
