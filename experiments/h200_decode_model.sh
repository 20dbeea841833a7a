#!/usr/bin/env bash
# Development data for the decode model on an H200 (bash experiments/h200_decode_model.sh), about 1-2 minutes:
# our decode kernel at fixed shapes over chosen split counts (experiments/bench_decode_splits.py): K/V
# bandwidth with one, two or a mix of one and two thread blocks per SM, and the per-kernel GPU busy time of
# launches of one or two tiny blocks. It runs no test-set configuration.
# Run from the repository root with simpy's wheel in .whl/ and the cubins (the microbenchmarks included, for
# the L2 flush) built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Writes under $OUT: gpu.txt, splits.txt, decode-splits.json, decode-splits.md, summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step splits 300 python3 -m flashsim.experiments.bench_decode_splits --out "$OUT"
finish
