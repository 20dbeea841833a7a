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
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
status=0
step() {  # step NAME SECONDS COMMAND...: the command's output in $OUT/NAME.txt, its exit status in summary.txt
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name: exit $rc ($(tail -1 "$OUT/$name.txt"))" | tee -a "$OUT/summary.txt"
  [ "$rc" -eq 0 ] || status=1
}
PYTEST=(python3 -m pytest -q -rfE -p no:cacheprovider)
step kernels-gpu 120 "${PYTEST[@]}" -m gpu tests/test_kernels_gpu.py
step hopper 120 "${PYTEST[@]}" -m gpu tests/test_hopper.py
step sanitizer 110 "${PYTEST[@]}" tests/test_kernels_sanitizer.py
[ "$status" -eq 0 ] && echo PASS | tee -a "$OUT/summary.txt" || echo FAIL | tee -a "$OUT/summary.txt"
exit "$status"
