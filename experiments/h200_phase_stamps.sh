#!/usr/bin/env bash
# Our v2 phase by phase on development shapes: the stamped build of kernels/v2.cu (clock64 at entry, Q and the
# first K landed, the first step done, the loop done, O staged, O stored), after validate's write flush and
# warm (experiments/phase_stamps.py). About a minute on an H200:
#     python3 -m flashsim.experiments.phase_stamps build     # first, where nvcc is
#     bash experiments/h200_phase_stamps.sh
# Run from the repository root with simpy's wheel in .whl/ and the cubins in build/kernels (stamps/ and the
# membw microbenchmark). Everything comes back in $OUT.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
step phase-stamps 200 python3 -m flashsim.experiments.phase_stamps run --out "$OUT/phase-stamps.json"
gzip -f "$OUT/phase-stamps.json"
finish
