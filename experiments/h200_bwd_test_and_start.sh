#!/usr/bin/env bash
# Two jobs in one device call (bash experiments/h200_bwd_test_and_start.sh), about 9 minutes: the backward test
# set re-predicted with the current model on the machine's CPUs (no GPU work; its measurements are the committed
# testset-bwd-measured.jsonl), beside experiments/h200_decode_start.sh on the GPU (short-decode start costs,
# development shapes only). Run from the repository root with simpy's wheel in .whl/ and the cubins built
# (flashsim kernels build --out build/kernels --arch sm_90a). Everything ends up in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
LIMIT=${LIMIT:-520}
mkdir -p "$OUT/test-bwd" "$OUT/start"
source experiments/device_env.sh
source experiments/device_steps.sh
RES=experiments/results/h200
cp "$RES/testset-bwd-measured.jsonl" "$OUT/test-bwd/"
jobs=$(( $(nproc) - 2 ))
step test-bwd "$LIMIT" python3 -m flashsim.cli validate --grid test-bwd --compare-only --hw h200 --jobs "$jobs" \
  --out-dir "$OUT/test-bwd" &
step start 300 python3 -m flashsim.experiments.bench_decode_start --out "$OUT/start" &
wait
grep -q ": exit [1-9]" "$OUT/summary.txt" && status=1  # the steps ran in subshells
tar czf "$OUT/results.tgz" -C "$OUT" --exclude='*-measured.jsonl' test-bwd start summary.txt gpu.txt test-bwd.txt \
  start.txt
rm -rf "$OUT/test-bwd" "$OUT/start"
finish
