#!/usr/bin/env bash
# The held-out decode and backward test sets measured on an H200 (bash experiments/h200_testset_inference.sh),
# timed only, each into its own measurement file, with SDPA's flash, cuDNN and memory-efficient kernels (set
# IMPLS to time others, e.g. IMPLS=decode,sdpa-flash,sdpa-cudnn once our decode kernel exists; ours skip with
# the reason while they do not). It ran in about a minute on an H200 with SDPA's three (session6/); python3
# -m flashsim.experiments.testset_passes estimates under 3 minutes. Each grid is capped below so that the whole
# run stays under 7 minutes, and a rerun of the same command resumes where a capped one stopped. Run from the repository root with simpy's wheel in .whl/ and the cubins
# in build/ (flashsim kernels build --out build/kernels --arch sm_90a: the L2 flush kernel comes from them).
# Writes under $OUT: gpu.txt, testset-decode-measured.jsonl, testset-bwd-measured.jsonl (the validator's
# records, a session record with the provenance first), decode-log.txt, bwd-log.txt, summary.txt.
set -uo pipefail
OUT=${OUT:-out}
IMPLS=${IMPLS:-sdpa-flash,sdpa-cudnn,sdpa-efficient}
mkdir -p "$OUT"
source experiments/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
for grid in decode bwd; do
  timeout 200 python3 -m flashsim.cli validate --grid "test-$grid" --impls "$IMPLS" --measure-only --no-ncu \
    --max-minutes 2.8 --out-dir "$OUT" > "$OUT/$grid-log.txt" 2>&1
  rc=$?
  ok=$(grep -c '"status": "ok"' "$OUT/testset-$grid-measured.jsonl" 2>/dev/null)
  echo "test-$grid: exit $rc, ${ok:-0} timings ok, $(grep -c 'skipped\|failed\|wrong' "$OUT/$grid-log.txt") not" \
    | tee -a "$OUT/summary.txt"
done
ls -la "$OUT"
