#!/usr/bin/env bash
# Where our v3 (and v2) kernels spend their cycles on development shapes off the FA2 grid's head dims
# (bash experiments/h200_v3_ncu.sh; about 5 minutes, at most 9): Nsight Compute's full set, its details page and
# its per-SASS-instruction counts and stall samples (source page, CSV) for v3 at d64, d96 and d128 and v2 at
# d96 (bf16, N = 4096, batch 4, 32 heads at d64 and 16 otherwise, non-causal; v3 d96 causal too). Run from the
# repository root with simpy's wheel in .whl/ and the cubins built (flashsim kernels build --out build/kernels
# --arch sm_90a). Everything comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
ncu_configs "^(v3_|flashsim_v2)" "$WGMMA_COUNTS" "v3 96 4096 0 4 16" "v3 64 4096 0 4 32" "v3 128 4096 0 4 16" \
  "v3 96 4096 1 4 16" "v2 96 4096 0 4 16"
cd "$OUT" && tar czf results.tgz --ignore-failed-read ncu-*.txt gpu.txt summary.txt && rm -f ncu-*.txt
cd - > /dev/null
finish
