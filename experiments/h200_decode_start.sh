#!/usr/bin/env bash
# What a short launch pays for the state validate's L2 flush leaves, on an H200 (bash
# experiments/h200_decode_start.sh), about 2 minutes: experiments/bench_decode_start.py times our decode kernel
# at short development shapes and hbm_probe's ring_read at its "fixed" points after a 256 MiB write (the flush
# every benchmark uses), a 256 MiB read (no dirty lines), the write then the same launch on other tensors (code
# warm, data cold) and no flush. No test-set configuration runs. Run from the repository root with simpy's
# wheel in .whl/ and the cubins, the microbenchmarks included (membw, hbm_probe), built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Writes under $OUT: gpu.txt, start.txt, decode-start.{json,md}, summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step start 300 python3 -m flashsim.experiments.bench_decode_start --out "$OUT"
finish
