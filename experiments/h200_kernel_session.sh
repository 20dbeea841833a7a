#!/usr/bin/env bash
# One run on an H200 after a change to one of our kernels (bash experiments/h200_kernel_session.sh ALGO):
# its GPU tests and the sanitizer checks, its FA2-grid benchmark (its rows replaced in a copy of the committed
# kernels-bench.json), and its validation measurements (timings and ncu bytes). Run from the repository root with simpy's wheel in .whl/ and the cubins in build/
# (flashsim kernels build --out build/kernels). Writes under $OUT.
set -uo pipefail
ALGO=$1
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
timeout 150 python3 -m pytest -q -m gpu tests/test_kernels_gpu.py -k "$ALGO" -p no:cacheprovider \
  2>&1 | tail -8 | tee "$OUT/gpu-tests-$ALGO.txt"
timeout 150 python3 -m pytest -q tests/test_kernels_sanitizer.py -p no:cacheprovider \
  2>&1 | tail -5 | tee "$OUT/sanitizer.txt"
mkdir -p "$OUT/bench" && cp experiments/results/h200/kernels-bench.json "$OUT/bench/"
timeout 120 python3 -m flashsim.experiments.bench_kernels --impls "$ALGO" --update --out "$OUT/bench" 2>&1 | tail -40
timeout 200 python3 -m flashsim.cli validate --grid fa2 --impls "$ALGO" --measure-only --max-minutes 3 --out-dir "$OUT/val" \
  --ncu-seqlens 2048,8192 2>&1 | tail -5
ls -la "$OUT" "$OUT"/*
