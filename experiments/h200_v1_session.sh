#!/usr/bin/env bash
# One run on an H200 for the v1 kernel with the released FA1 tiles (16 x 256 / 16 x 128, FA1's split rule):
# its GPU tests and sanitizer checks, its FA2-grid benchmark, and its validation measurements (timings and
# ncu bytes). Run from the repository root with simpy's wheel in .whl/ and the cubins in build/ (flashsim
# kernels build --out build/kernels). Writes under $OUT.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHSIM_KERNEL_DIR=$PWD/build/kernels
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
timeout 150 python3 -m pytest -q -m gpu tests/test_kernels_gpu.py -k v1 -p no:cacheprovider \
  2>&1 | tail -8 | tee "$OUT/gpu-tests-v1.txt"
timeout 150 python3 -m pytest -q tests/test_kernels_sanitizer.py -p no:cacheprovider \
  2>&1 | tail -5 | tee "$OUT/sanitizer.txt"
timeout 120 python3 -m experiments.bench_kernels --impls v1 --out "$OUT/bench" 2>&1 | tail -40
timeout 200 python3 cli.py validate --grid fa2 --impls v1 --measure-only --max-minutes 3 --out-dir "$OUT/val" \
  --ncu-seqlens 2048,8192 2>&1 | tail -5
ls -la "$OUT" "$OUT"/*
