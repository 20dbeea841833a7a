#!/usr/bin/env bash
# Every kernel's GPU tests on one merged tree, plus our decode and backward kernels on the frozen decode and
# backward test sets (bash experiments/h200_merged.sh, under 10 minutes on an H200). Run from the repository
# root with simpy's wheel in .whl/ and the cubins built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Writes under $OUT: gpu.txt, testset/ (h200_testset_inference.sh's files for IMPLS, default decode,v2),
# gpu-tests.txt (pytest over every GPU test file, with the slowest tests listed) and summary.txt.
set -uo pipefail
OUT=${OUT:-out}
IMPLS=${IMPLS:-decode,v2}
mkdir -p "$OUT/testset"
source experiments/device_env.sh
source experiments/device_steps.sh
for grid in decode bwd; do
  step "testset-$grid" 130 python3 -m flashsim.cli validate --grid "test-$grid" --impls "$IMPLS" --measure-only \
    --no-ncu --max-minutes 1.8 --out-dir "$OUT/testset"
done
step gpu-tests 360 python3 -m pytest -rfE -p no:cacheprovider --durations=12 -m gpu tests/test_kernels_gpu.py \
  tests/test_hopper.py tests/test_decode_gpu.py tests/test_backward_gpu.py tests/test_fp8_prepass.py
finish
