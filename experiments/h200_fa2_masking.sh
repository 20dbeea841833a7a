#!/usr/bin/env bash
# SDPA flash's (FA2's) kernels that `h200_fa2_odd.sh` left out (bash experiments/h200_fa2_masking.sh; about 3
# minutes): Nsight Compute's full set with the SASS source page for the odd-length (Is_even_MN=false)
# instantiations not yet measured (d64 and d128 non-causal, d96 and d256 causal and not) and the even d96 and
# d256 causal ones beside them, at N 3000 (not a multiple of any tile) and N 3072, for their code lines
# (`experiments.code_lines`) and each step's instructions (`experiments.ncu_regions`). Run from the repository
# root with simpy's wheel in .whl/. Everything comes back in $OUT/results.tgz.
set -uo pipefail
source experiments/device_env.sh  # $OUT made and absolute there
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
ncu_configs "flash_fwd_kernel" "$MMA_SYNC_COUNTS" "sdpa-flash 64 3000 0 3 32" "sdpa-flash 128 3000 0 3 16" \
  "sdpa-flash 96 3000 1 3 16" "sdpa-flash 96 3072 1 3 16" "sdpa-flash 96 3000 0 3 16" \
  "sdpa-flash 256 3000 1 3 8" "sdpa-flash 256 3072 1 3 8" "sdpa-flash 256 3000 0 3 8"
pack_results 'ncu-*' 'gpu.txt' '*.txt'
finish
