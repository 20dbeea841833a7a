#!/usr/bin/env bash
# Our v3 and v3-fp8 timed again on the development grid and v3 on the held-out test set after a kernel change
# (bash experiments/h200_v3_remeasure.sh, about 4 minutes on an H200): GPU busy time, L2 flushed, no Nsight
# Compute. Each grid goes to its own directory under $OUT (dev/validation-measured.jsonl,
# test/testset-measured.jsonl, with a session record carrying the provenance first); appended to the committed
# files, the newer record of a key replaces the older one. Run from the repository root with simpy's wheel in
# .whl/ and the cubins built where nvcc is: flashsim kernels build --out build/kernels --arch sm_90a
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT/dev" "$OUT/test"
source experiments/device_env.sh
source experiments/device_steps.sh
step dev 230 python3 -m flashsim.cli validate --grid fa2 --impls v3,v3-fp8 --measure-only --no-ncu --max-minutes 3.2 \
  --out-dir "$OUT/dev"
step test 230 python3 -m flashsim.cli validate --grid test --impls v3 --measure-only --no-ncu --max-minutes 3.2 \
  --out-dir "$OUT/test"
finish
