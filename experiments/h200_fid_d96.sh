#!/usr/bin/env bash
# Why our v2 at d96 runs 13-24% slower than modelled where SDPA's flash (FA2) at d96 runs 5-15% slower and both
# at d128 ~10% (bash experiments/h200_fid_d96.sh; about 6 minutes). Nsight Compute's full set, with
# shared-memory bank conflicts and executed instructions and stall samples per SASS instruction, for our v2
# and SDPA flash at d96 and our v2 at d128 (bf16, batch 4 x 16 heads, N = 4096, non-causal):
# ncu-{impl}-d{D}-n4096-c0{,-details,-sass}.txt, read by `python3 -m flashsim.experiments.ncu_regions`.
# Run from the repository root with simpy's wheel in .whl/ and our cubins in build/kernels. Everything comes
# back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"

COUNTS=$MMA_SYNC_COUNTS,$SMEM_LD_COUNTS
COUNTS+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
ncu_configs "flash_fwd_kernel|flashsim_v2" "$COUNTS" "v2 96 4096 0 4 16" "sdpa-flash 96 4096 0 4 16" "v2 128 4096 0 4 16"
cd "$OUT" && tar czf results.tgz --ignore-failed-read ncu-*.txt gpu.txt summary.txt && rm -f ncu-*.txt
cd - > /dev/null
finish
