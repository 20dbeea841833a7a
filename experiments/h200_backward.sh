#!/usr/bin/env bash
# FlashAttention-2's backward on an H200 (bash experiments/h200_backward.sh), in about 1 minute: the GPU tests
# of the v2-bwd kernels (tests/test_backward_gpu.py: gradients against fp64 autograd), then
# experiments/bench_backward.py (its own correctness check first, then our backward against SDPA flash and
# cuDNN on the FA2 grid). Run from the repository root with simpy's wheel in .whl/ and the cubins built where
# nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# (no --algo: the L2 flush between timed calls uses the membw microbenchmark it builds too). Writes under
# $OUT: backward-tests.txt, backward.log, backward.jsonl, backward.json, backward.md and summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
status=0
timeout 240 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/test_backward_gpu.py > "$OUT/backward-tests.txt" 2>&1
rc=$?
echo "backward-tests: exit $rc ($(tail -1 "$OUT/backward-tests.txt"))" | tee -a "$OUT/summary.txt"
[ "$rc" -eq 0 ] || status=1
# The benchmark stops (exit 1) on a gradient mismatch before timing anything.
timeout 300 python3 -m flashsim.experiments.bench_backward --out "$OUT" > /dev/null 2>&1
rc=$?
echo "bench-backward: exit $rc ($(grep -m1 "small-shape" "$OUT/backward.log" 2>/dev/null))" | tee -a "$OUT/summary.txt"
[ "$rc" -eq 0 ] || status=1
[ "$status" -eq 0 ] && echo PASS | tee -a "$OUT/summary.txt" || echo FAIL | tee -a "$OUT/summary.txt"
exit "$status"
