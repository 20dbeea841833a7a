#!/usr/bin/env bash
# v3 with its defaults of algorithms/tile_order.prefetch (16-bit d64 / d128: the two-Q-buffer kernel on a
# persistent grid taking tiles from a counter) on an H200 (bash experiments/h200_v3_defaults.sh, about 3-4
# minutes, at most 8.5): the Hopper GPU tests (every buffered kernel gives the plain kernel's bits), the
# Hopper sanitizer test, then v3 as called by default against cuDNN, d64 / d128, causal and not, seqlen
# 512..16k (bench_hopper versus: GPU busy time, L2 flushed, median of 3 calls). Run from the repository root
# with simpy's wheel in .whl/ and the cubins built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Writes under $OUT: gpu.txt, hopper.txt, sanitizer.txt, versus.txt, v3-vs-cudnn.{json,md}, summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step hopper 150 python3 -m pytest -rfE -p no:cacheprovider -m gpu tests/test_hopper.py tests/test_fp8_prepass.py
step sanitizer 60 python3 -m pytest -rfE -p no:cacheprovider tests/test_kernels_sanitizer.py -k "v3 or hopper"
step versus 300 python3 -m flashsim.experiments.bench_hopper versus --out "$OUT"
finish
