#!/usr/bin/env bash
# Predict the validation sets again on a machine of many CPUs whose commands are limited in time (the device's
# 16 CPUs, 10 minutes a command): every set's light share (simulations that took at most HEAVY_ABOVE seconds for
# its last report, and those it lacks) goes into the sets' prediction journals from one pool of JOBS processes,
# the longest first; the heavy share runs where a simulation may take longer (`flashsim validate --compare-only
# --journal-only --share heavy`), and a plain `flashsim validate --compare-only` there writes every report from
# the journals. Run from the repository root with simpy's wheel in .whl/; LIMIT is the seconds it may take in
# all (a pool cut short resumes from the journals: carry them into the next call). PROFILES lists the profiles
# to predict, each as NAME:HEAVY_ABOVE (its reports in experiments/results/NAME), one after another.
#   LIMIT=540 PROFILES="h200:300 h100:150" bash experiments/device_predict.sh
# The journals come back in $OUT/journals.tgz (unpack beside the local ones and append: they are line journals).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
deadline=$(( $(date +%s) + ${LIMIT:-500} ))
for spec in ${PROFILES:-h200:${HEAVY_ABOVE:-300}}; do
  hw=${spec%%:*}
  left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 10 ] || break
  echo "== $hw (light share, at most ${spec##*:} s a simulation; $left s left)" >> "$OUT/predict.txt"
  timeout "$left" python3 -m flashsim.cli validate --compare-only --journal-only --share light --hw "$hw" \
    --out-dir "experiments/results/$hw" --heavy-above "${spec##*:}" --jobs "${JOBS:-16}" >> "$OUT/predict.txt" 2>&1
done
tar czf "$OUT/journals.tgz" experiments/results/h*/.*-predictions.jsonl 2>/dev/null || echo "no journals: nothing was simulated"
tail -n 3 "$OUT/predict.txt"
wc -l experiments/results/h*/.*-predictions.jsonl 2>/dev/null | tail -n 1
