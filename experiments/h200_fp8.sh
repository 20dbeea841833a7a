#!/usr/bin/env bash
# v3-fp8 with its fused quantisation pre-pass on an H200 (bash experiments/h200_fp8.sh), in about 2 minutes:
# the pre-pass against its torch reference bit for bit and v3-fp8 end to end against fp64
# (tests/test_fp8_prepass.py), the v3-fp8 GPU tests of tests/test_hopper.py (the FP8 error-study ordering
# among them), the sanitizers over every kernel, then the FP8 RMSE table and v3-fp8 end to end (pre-pass shown
# separately) vs v3 bf16 at d128, d256, d96, d192 and d64, seqlen 1k..16k, causal off and on (bench_hopper
# fp8; the files are rewritten after each row, so the step's time limit only cuts the last head dims). Run
# from the repository root with simpy's wheel in .whl/ and the cubins built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Writes under $OUT: gpu.txt, prepass.txt, hopper-fp8.txt, clusters.txt (the pre-pass alone per cluster
# size), sanitizer.txt, bench.txt, fp8-bench.json, fp8-bench.md and summary.txt (one line per step, then
# PASS or FAIL).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
PYTEST=(python3 -m pytest -q -rfE -p no:cacheprovider)
step prepass 150 "${PYTEST[@]}" -m gpu tests/test_fp8_prepass.py
step hopper-fp8 150 "${PYTEST[@]}" -m gpu tests/test_hopper.py -k fp8
step clusters 60 python3 -m flashsim.experiments.bench_hopper prepass
step sanitizer 120 "${PYTEST[@]}" tests/test_kernels_sanitizer.py
step bench 270 python3 -m flashsim.experiments.bench_hopper fp8 --causal --headdims 128 256 96 192 64 --out "$OUT"
finish
