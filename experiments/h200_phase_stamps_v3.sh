#!/usr/bin/env bash
# Our v3 phase by phase on development shapes (experiments/phase_stamps_v3.py), then the Hopper kernels' GPU
# tests with the v3 and v3-fp8 cubins rebuilt after the stamps were added (compiled out by default). About two
# minutes on an H200:
#     python3 -m flashsim.experiments.phase_stamps_v3 build     # first, where nvcc is
#     bash experiments/h200_phase_stamps_v3.sh
# Run from the repository root with simpy's wheel in .whl/ and the cubins in build/kernels (stamps/, v3,
# v3-fp8 and the membw microbenchmark). Everything comes back in $OUT.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
step phase-stamps-v3 150 python3 -m flashsim.experiments.phase_stamps_v3 run --out "$OUT/phase-stamps-v3.json"
gzip -f "$OUT/phase-stamps-v3.json"
step hopper-gpu 200 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/test_hopper.py
finish
