#!/usr/bin/env bash
# The backward and decode test sets compared again with the current model on the GPU machine's CPUs (no GPU):
# bash experiments/h200_refresh_tests.sh. Both sets side by side (most cores to the backward set), each
# journaling its simulations, so a set cut off at LIMIT seconds (default 540) resumes from its journal on any
# machine (`flashsim validate --grid test-bwd --compare-only --out-dir DIR`). Everything in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
LIMIT=${LIMIT:-540}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
status=0
RES=experiments/results/h200
cores=$(nproc)
for grid_stem in "test-bwd:testset-bwd:$((cores - 3))" "test-decode:testset-decode:3"; do
  IFS=: read -r grid stem jobs <<< "$grid_stem"
  mkdir -p "$OUT/$grid"
  cp "$RES/$stem-measured.jsonl" "$OUT/$grid/"
  step "$grid" "$LIMIT" python3 -m flashsim.cli validate --grid "$grid" --compare-only --hw h200 --jobs "$jobs" \
    --out-dir "$OUT/$grid" &
done
wait
grep -q ": exit [1-9]" "$OUT/summary.txt" && status=1  # the steps ran in subshells
tar czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz --exclude '*.png' .
finish
