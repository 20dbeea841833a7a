#!/usr/bin/env bash
# Predict the validation sets again on a machine of many CPUs whose commands are limited in time (the device's
# 16 CPUs, 10 minutes a command): each set's light share (simulations that took at most HEAVY_ABOVE seconds for
# its last report) goes into its prediction journal; the heavy share runs where a simulation may take longer
# (`flashsim validate --compare-only --journal-only --share heavy`), and a plain `flashsim validate
# --compare-only` there writes every report from the journals. Run from the repository root with simpy's wheel
# in .whl/; SETS lists "GRID:WORKERS" (they run at once: the workers should add up to the CPUs), LIMIT the
# seconds they may take (a set cut short resumes from its journal: carry the journals into the next call).
#   SETS="test:6 dev-llm:6 fa2:4" LIMIT=500 bash experiments/device_predict.sh
# The journals come back in $OUT/journals.tgz (unpack at the repository root).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
for spec in ${SETS:-test:6 dev-llm:6 fa2:4}; do
  grid=${spec%%:*}
  timeout "${LIMIT:-500}" python3 -m flashsim.cli validate --compare-only --grid "$grid" --journal-only \
    --share light --heavy-above "${HEAVY_ABOVE:-300}" --jobs "${spec##*:}" > "$OUT/predict-$grid.txt" 2>&1 &
done
wait
tar czf "$OUT/journals.tgz" experiments/results/h200/.*-predictions.jsonl 2>/dev/null || echo "no journals: nothing was simulated"
tail -n 2 "$OUT"/predict-*.txt
