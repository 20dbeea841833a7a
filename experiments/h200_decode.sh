#!/usr/bin/env bash
# The decode kernel on an H200 (bash experiments/h200_decode.sh), about 6 minutes: its GPU tests
# (tests/test_decode_gpu.py, ~15 s), then experiments/bench_decode.py (ours vs SDPA flash and cuDNN over KV
# lengths 1k..128k, batch 1..64, GQA 1..8, d128 and d64; our paged cache at pages 16/64/256 vs dense).
# Run from the repository root with simpy's wheel in .whl/ and the cubins (the microbenchmarks included, for
# the L2 flush) built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Writes under $OUT: gpu.txt, decode-gpu.txt, bench.txt, decode-bench.json, decode-bench.md, summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step decode-gpu 90 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/test_decode_gpu.py
step bench 400 python3 -m flashsim.experiments.bench_decode --out "$OUT" --minutes 5.5
finish
