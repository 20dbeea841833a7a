#!/usr/bin/env bash
# What a taken branch costs the instruction fetch on an H200 (bash experiments/h200_decode_fid5.sh; under a
# minute of GPU time). Our decode kernel's short launches wait for instructions in their loop as well
# (results/h200/decode-fid/ncu/: 29-45% of the loop's stall samples are no_instruction after 4-16 steps), yet
# the fetch microbenchmark found straight-line loops of up to 32 KiB issuing at the schedulers' rate. The
# step's code branches (~8 taken branches per warp per step, more in the prologue and epilogue); this times
# ifetch.cu's branching kernels (ifetch_b7 / ifetch_b23: one taken branch per nine instructions run, the
# target one and two lines on) against its straight lines: `python3 -m flashsim.experiments.ifetch_probe
# --sweep branch`, 2-64 KiB of code, 1 and 4 warps, one block, straight-line and looped, after the L2 flush
# and warm; with the kernels' SASS (cuobjdump) to check the branches are there. No attention kernel runs.
# Run from the repository root with simpy's wheel in .whl/ and the microbenchmark cubins (ifetch, membw for
# the flush) built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Everything comes back in $OUT/results.tgz (gpu.txt, ifetch-branch.{json,md,txt}, ifetch-sass.txt (instructions and
# branches per kernel), ifetch.sass.gz,
# summary.txt).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RES=$(mktemp -d)
FINAL=$OUT
OUT=$RES
source experiments/device_env.sh
source experiments/device_steps.sh
step ifetch-branch 240 python3 -m flashsim.experiments.ifetch_probe --sweep branch --out "$OUT"
# the SASS (gzip) and, per kernel, its instructions and branches
sass_counts() {
  cuobjdump -sass build/kernels/microbench/ifetch.sm_90a.cubin > "$OUT/ifetch.sass" || return 1
  awk '/Function :/ {f = $3} /^ +\/\*[0-9a-f]+\*\/ / {n[f]++} / BRA / {b[f]++}
       END {for (k in n) print k, n[k], b[k]}' "$OUT/ifetch.sass" | sort
  gzip -f "$OUT/ifetch.sass"
}
export -f sass_counts
export OUT
step ifetch-sass 60 bash -c sass_counts
[ "$status" -eq 0 ] && echo PASS >> "$OUT/summary.txt" || echo FAIL >> "$OUT/summary.txt"
tar -czf "$FINAL/results.tgz" -C "$RES" .
cat "$OUT/summary.txt"
exit "$status"
