#!/usr/bin/env bash
# The model against every committed measurement, on the GPU machine's CPUs (bash experiments/h200_compare.sh,
# under 9 minutes with 16 cores), while its GPU times our v3 against cuDNN (bench_hopper versus): the
# development and test sets in one run (validation.*, testset.*, accuracy report), the decode and backward test
# sets each in its own run beside it, so a set that runs long cannot cost the others their reports. Run from the
# repository root with simpy's wheel in .whl/ and the cubins built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Everything it writes ends up in $OUT/results.tgz (the machine returns a handful of files only): the reports
# under h200/, the versus table under versus/, logs and summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
RES=experiments/results/h200
python3 -m flashsim.experiments.bench_hopper versus --out "$OUT/versus" > "$OUT/versus.txt" 2>&1 &
bench=$!
for set in decode bwd; do  # each in a directory of its own, so the runs write apart
  mkdir -p "$OUT/$set"
  cp "$RES/testset-$set-measured.jsonl" "$OUT/$set/"
  timeout 500 python3 -m flashsim.cli validate --compare-only --hw h200 --jobs 3 --out-dir "$OUT/$set" \
    > "$OUT/$set.txt" 2>&1 &
done
step dev-test 500 python3 -m flashsim.cli validate --compare-only --hw h200 --jobs 10
wait
echo "decode, bwd, versus: $(tail -1 "$OUT/decode.txt" | cut -c1-80) | $(tail -1 "$OUT/bwd.txt" | cut -c1-80)" \
  | tee -a "$OUT/summary.txt"
mkdir -p "$OUT/h200"
cp "$RES"/validation.* "$RES"/testset.* "$RES"/accuracy*.md "$OUT/h200/" 2>/dev/null
cp "$OUT"/decode/testset-decode.* "$OUT"/bwd/testset-bwd.* "$OUT/h200/" 2>/dev/null
tar czf "$OUT/results.tgz" -C "$OUT" h200 versus summary.txt dev-test.txt decode.txt bwd.txt versus.txt gpu.txt
finish
