#!/usr/bin/env bash
# The phase experiment: our v2 forward, one wave of two blocks per SM (batch 2, N 4224, d64/d96/d128/d256,
# development shapes of no set), with the second block to start on each SM held back 0-4800 SM cycles
# (start_stagger_cycles), and batch 1 beside; GPU busy time, L2 flushed (python3 -m
# flashsim.experiments.stagger measure; about a minute on an H200). Compared with the model by `stagger compare`.
# Run from the repository root with simpy's wheel in .whl/ and the cubins built (flashsim kernels build --out
# build/kernels --arch sm_90a, and the membw microbenchmark for the flush).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/gpu.txt"
step stagger 400 python3 -m flashsim.experiments.stagger measure "$OUT/stagger.json" --reps "${REPS:-15}"
finish
