#!/usr/bin/env bash
# SDPA flash's (FA2's) causal kernel at a length that is not a multiple of its tiles, beside one that is (bash
# experiments/h200_fa2_odd.sh; about 4 minutes): Nsight Compute's full set with the SASS source page for the d64
# kernel at the FA2 grid's B3 H32 N3000 (odd: FA2 runs its Is_even_MN=false instantiation, two masking steps a
# block) and B3 H32 N3072 (even: one), and the d128 kernel at B3 H16 N3000 and N3072, for their code lines
# (`experiments.code_lines`) and each step's cost (`experiments.ncu_regions`). Run from the repository root with
# simpy's wheel in .whl/. Everything comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
ncu_configs "flash_fwd_kernel" "$MMA_SYNC_COUNTS" "sdpa-flash 64 3000 1 3 32" "sdpa-flash 64 3072 1 3 32" \
  "sdpa-flash 128 3000 1 3 16" "sdpa-flash 128 3072 1 3 16"
pack_results 'ncu-*' 'gpu.txt' '*.txt'
finish
