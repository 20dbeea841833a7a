#!/usr/bin/env bash
# The model against every committed measurement, on the GPU machine's CPUs (bash experiments/h200_compare.sh,
# at most LIMIT seconds, default 540): the development set, the test set, the decode and backward test sets
# and the published figures, each in a directory and a process pool of its own, side by side, so a set that
# runs long cannot cost the others their reports. Each comparison journals its simulations as they finish
# (.<set>-predictions.jsonl): a set cut off by the time limit comes back with its journal, and
# `flashsim validate --compare-only` resumes it from there on any machine. Needs no GPU; run from the
# repository root with simpy's wheel in .whl/. Everything ends up in $OUT/results.tgz (the machine returns a
# handful of files only): each set's directory, logs and summary.txt. SETS picks the sets (default: these five,
# "test fa2 test-bwd test-decode published"; dev-llm and dev-tiles, the LLM-shaped and per-tile development sets,
# when named); the cores
# are shared among those picked. IMPLS (comma-separated) keeps only those implementations' measurements, for a
# change that moves only theirs. VALIDATE_ARGS goes to every comparison (e.g. "--set clock_model=1" or
# "--o-store tma").
set -uo pipefail
OUT=${OUT:-out}
LIMIT=${LIMIT:-540}
SETS=${SETS:-test fa2 test-bwd test-decode published}
IMPLS=${IMPLS:-}
VALIDATE_ARGS=${VALIDATE_ARGS:-}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
RES=experiments/results/h200
cores=$(nproc)
# grid, results-dir file stem, share of the cores (the test set is the largest)
run_set() {
  local grid=$1 stem=$2 jobs=$3
  mkdir -p "$OUT/$grid"
  if [ -n "$IMPLS" ]; then
    python3 - "$RES/$stem-measured.jsonl" "$OUT/$grid/$stem-measured.jsonl" "$IMPLS" <<'PY'
import json, sys
keep = set(sys.argv[3].split(","))
with open(sys.argv[1]) as src, open(sys.argv[2], "w") as dst:
    dst.writelines(line for line in src if json.loads(line).get("impl", next(iter(keep))) in keep)
PY
  else
    cp "$RES/$stem-measured.jsonl" "$OUT/$grid/"
  fi
  cp "$RES"/.*"-predictions.jsonl" "$OUT/$grid/" 2>/dev/null  # a journal left by an earlier cut-off run
  # shellcheck disable=SC2086  # VALIDATE_ARGS is a list of words
  step "$grid" "$LIMIT" python3 -m flashsim.cli validate --grid "$grid" --compare-only --hw h200 --jobs "$jobs" \
    --out-dir "$OUT/$grid" $VALIDATE_ARGS
}
picked() { [[ " $SETS " == *" $1 "* ]]; }
# shares of the cores: the test set is the largest; without the backward set its share goes to the test set
share_test=$((cores / 2)); picked test-bwd || share_test=$((cores * 5 / 8))
picked test && run_set test testset "$share_test" &
picked fa2 && run_set fa2 validation $((cores / 4)) &
picked test-bwd && run_set test-bwd testset-bwd $((cores / 8 > 0 ? cores / 8 : 1)) &
picked test-decode && run_set test-decode testset-decode 1 &
share_llm=$((cores / 8 > 0 ? cores / 8 : 1)); picked test-bwd || share_llm=$((cores / 4))
picked dev-llm && run_set dev-llm devset-llm "$share_llm" &
picked dev-tiles && run_set dev-tiles devset-tiles "$share_llm" &
if picked published; then
  mkdir -p "$OUT/published"
  step published "$LIMIT" python3 -m flashsim.cli validate --published --jobs 2 --out-dir "$OUT/published" &
fi
wait
grep -q ": exit [1-9]" "$OUT/summary.txt" && status=1  # the steps ran in subshells
tar czf "$OUT/results.tgz" -C "$OUT" --exclude='*-measured.jsonl' --ignore-failed-read $SETS summary.txt gpu.txt \
  $(for s in $SETS; do echo "$s.txt"; done)
(cd "$OUT" && rm -rf $SETS)  # only the archive comes back: the machine returns a handful of files
finish
