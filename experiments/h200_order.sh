#!/usr/bin/env bash
# v3's causal tile order on an H200 (bash experiments/h200_order.sh, about 3 minutes): the Hopper GPU tests
# (tests/test_hopper.py: every tile order computes the same bits), the Hopper sanitizer tests, then v3's tile
# orders and grids against cuDNN on causal problems, GPU busy time (bench_hopper order). Run from the
# repository root with simpy's wheel in .whl/ and the cubins built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Writes under $OUT: gpu.txt, hopper.txt, sanitizer.txt, order.txt, v3-causal-order.{json,md}, summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step hopper 200 python3 -m pytest -rfE -p no:cacheprovider -m gpu tests/test_hopper.py tests/test_fp8_prepass.py
step sanitizer 120 python3 -m pytest -rfE -p no:cacheprovider tests/test_kernels_sanitizer.py -k "v3 or hopper"
step order 200 python3 -m flashsim.experiments.bench_hopper order --out "$OUT"
finish
