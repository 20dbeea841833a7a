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
#   LIMIT=540 PROFILES="h200:300 h100:150" HEAVY=1 bash experiments/device_predict.sh   # the rest, then the heavy
# The journals come back in $OUT/journals.tgz (unpack beside the local ones and append: they are line journals),
# the compiled build in $OUT/compiled.tgz (carry it into the next call as BUILD).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
deadline=$(( $(date +%s) + ${LIMIT:-500} ))
# The simulator's hot modules compiled first (setup.py; the same answers, faster), or the build an earlier call
# returned unpacked (BUILD=its compiled.tgz, carried); without Cython or a compiler the source runs.
if [ -n "${BUILD:-}" ] && [ -f "$BUILD" ]; then
  tar xzf "$BUILD"
else
  python3 setup.py -q build_ext --inplace > "$OUT/build.txt" 2>&1 || echo "no compiled modules: the source runs" >> "$OUT/build.txt"
  [ -d _compiled ] && tar czf "$OUT/compiled.tgz" _compiled
fi
python3 -c "import flashsim.simulator.api, flashsim.compiled as c; print(c.status())" >> "$OUT/predict.txt" 2>&1
for spec in ${PROFILES:-h200:${HEAVY_ABOVE:-300}}; do
  hw=${spec%%:*}
  left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 10 ] || break
  echo "== $hw (light share, at most ${spec##*:} s a simulation; $left s left)" >> "$OUT/predict.txt"
  timeout "$left" python3 -m flashsim.cli validate --compare-only --journal-only --share light --hw "$hw" \
    --out-dir "experiments/results/$hw" --heavy-above "${spec##*:}" --jobs "${JOBS:-16}" >> "$OUT/predict.txt" 2>&1
done
# HEAVY=1: then every profile's heavy share at once (JOBS split between them) in the time left. A call that finds
# the machine still warm finds the journals (and the build) of the call before it there.
if [ -n "${HEAVY:-}" ]; then
  specs=(${PROFILES:-h200:${HEAVY_ABOVE:-300}})
  left=$(( deadline - $(date +%s) ))
  if [ "$left" -gt 10 ]; then
    for spec in "${specs[@]}"; do
      hw=${spec%%:*}
      echo "== $hw (heavy share, above ${spec##*:} s; $left s left)" >> "$OUT/predict.txt"
      timeout "$left" python3 -m flashsim.cli validate --compare-only --journal-only --share heavy --hw "$hw" \
        --out-dir "experiments/results/$hw" --heavy-above "${spec##*:}" --jobs $(( ${JOBS:-16} / ${#specs[@]} )) \
        >> "$OUT/predict-$hw-heavy.txt" 2>&1 &
    done
    wait
    tail -n 3 "$OUT"/predict-*-heavy.txt >> "$OUT/predict.txt"
  fi
fi
tar czf "$OUT/journals.tgz" experiments/results/h*/.*-predictions.jsonl 2>/dev/null || echo "no journals: nothing was simulated"
tail -n 3 "$OUT/predict.txt"
wc -l experiments/results/h*/.*-predictions.jsonl 2>/dev/null | tail -n 1
