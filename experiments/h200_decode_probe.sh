#!/usr/bin/env bash
# HBM-side evidence for the decode model on an H200 (bash experiments/h200_decode_probe.sh), under 4 minutes:
# - experiments/hbm_probe.py: streaming-read bandwidth through a cp.async ring like the decode kernel's, vs the
#   SMs reading (1..all, first or spread), blocks per SM (1..4), bytes in flight per block (stages x tile), an
#   uneven mix of one and two blocks per SM, the hardware's own placement of decode-sized grids, and a short
#   kernel's duration vs bytes read (the fixed cost); L2 flushed, GPU busy time from the profiler;
# - experiments/bench_decode_splits.py: our decode kernel at fixed shapes over chosen split counts.
# No test-set configuration runs. Run from the repository root with simpy's wheel in .whl/ and the cubins,
# the microbenchmarks included (hbm_probe, membw for the flush), built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Writes under $OUT: gpu.txt, probe.txt, hbm-probe.{jsonl,json,md}, splits.txt, decode-splits.{json,md},
# summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step probe 160 python3 -m flashsim.experiments.hbm_probe --out "$OUT" --max-seconds 120
step splits 75 python3 -m flashsim.experiments.bench_decode_splits --out "$OUT"
finish
