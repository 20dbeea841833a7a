#!/usr/bin/env bash
# The kernels' GPU checks on an H200 (bash experiments/h200_check.sh), in under 6 minutes: every GPU test of
# the kernels (tests/test_kernels_gpu.py: standard, v1, v2; tests/test_hopper.py: v3, v3-fp8) and the
# compute-sanitizer tests (tests/test_kernels_sanitizer.py). Run from the repository root with simpy's wheel
# in .whl/ and the cubins built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# device_env.sh points FLASHSIM_KERNEL_DIR at build/kernels; an H200 loads the sm_90a cubins of every family
# (registry.KernelFamily.arch_for), so sm_80 is not needed there. Writes 5 files under $OUT: gpu.txt,
# kernels-gpu.txt, hopper.txt, sanitizer.txt and summary.txt (one line per step, then PASS or FAIL).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
PYTEST=(python3 -m pytest -q -rfE -p no:cacheprovider)
step kernels-gpu 120 "${PYTEST[@]}" -m gpu tests/test_kernels_gpu.py
step hopper 120 "${PYTEST[@]}" -m gpu tests/test_hopper.py
step sanitizer 110 "${PYTEST[@]}" tests/test_kernels_sanitizer.py
finish
