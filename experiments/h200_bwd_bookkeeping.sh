#!/usr/bin/env bash
# The backward kernels' bookkeeping (bash experiments/h200_bwd_bookkeeping.sh; about 3 minutes): Nsight
# Compute's per-SASS-instruction executed counts of one launch of our v2 backward's main kernel and of SDPA
# flash's (FA2's flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel), bf16, FA2 grid, non-causal N 4096 at d64 and
# d128, as ncu-IMPL-dD-n4096-c0-sass.txt (read by `python3 -m flashsim.experiments.bookkeeping`); then the GPU
# tests of the mma.sync kernels (tests/test_kernels_gpu.py). Run from the repository root with simpy's wheel in
# .whl/ and the cubins built (flashsim kernels build --out build/kernels --arch sm_90a).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
declare -A KERNEL=([ours]="regex:flashsim_v2_bwd.*_bwd$" [sdpa-flash]="regex:flash_bwd_dq_dk_dv_loop")
for impl in ours sdpa-flash; do
  for d in 64 128; do
    name=$impl-d$d-n4096-c0
    step "ncu-$name" 60 ncu --clock-control none --section SourceCounters --section LaunchStats --import-source no \
      --kernel-name "${KERNEL[$impl]}" --launch-skip 1 --launch-count 1 -f -o "$OUT/$name" \
      python3 -m flashsim.experiments.bwd_profile_target "$impl" "$d" 4096 0
    step "ncu-$name-sass" 30 ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass
    rm -f "$OUT/$name.ncu-rep"
  done
done
step bookkeeping 30 python3 -m flashsim.experiments.bookkeeping "$OUT"/ncu-*-sass.txt
step gpu-tests 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_gpu.py
finish
