#!/usr/bin/env bash
# Nsight Compute's byte counts for a sample of the frozen test set (bash experiments/h200_testset_bytes.sh; ~5
# minutes): N configurations drawn with validate's fixed seed, half causal, for our v2 and v3 and SDPA's
# flash and cuDNN. The timings are the committed ones (the run resumes from the test set's measurement file,
# so nothing is timed again); only the new session and ncu records come back, in $OUT/testset-bytes.jsonl,
# to be appended to experiments/results/h200/testset-measured.jsonl. Kernels prebuilt in build/kernels.
set -uo pipefail
OUT=${OUT:-out}
N=${N:-12}
mkdir -p "$OUT/tb"
source experiments/device_env.sh
source experiments/device_steps.sh
RES=experiments/results/h200
cp "$RES/testset-measured.jsonl" "$OUT/tb/"
before=$(wc -l < "$OUT/tb/testset-measured.jsonl")
step bytes 420 python3 -m flashsim.cli validate --grid test --ncu-sample "$N" --measure-only --max-minutes 6.5 \
  --out-dir "$OUT/tb"
tail -n +"$((before + 1))" "$OUT/tb/testset-measured.jsonl" > "$OUT/testset-bytes.jsonl"
echo "new records: $(wc -l < "$OUT/testset-bytes.jsonl")" | tee -a "$OUT/summary.txt"
rm -rf "$OUT/tb"
finish
