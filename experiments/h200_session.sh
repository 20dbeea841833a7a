#!/usr/bin/env bash
# One run on an H200: GPU tests of every kernel, the per-warp mma.sync microbenchmark, and the
# validation sweep (timings + ncu bytes). Run from the repository root with simpy's wheel in .whl/ and the
# cubins in build/ (flashsim kernels build --out build/kernels --arch sm_90a). Writes under $OUT.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
timeout 200 python3 -m pytest -q -m gpu tests/test_kernels_gpu.py tests/test_hopper.py -p no:cacheprovider \
  2>&1 | tail -15 | tee "$OUT/gpu-tests.txt"
timeout 90 python3 -m flashsim.cli calibrate --only mma_warps --out-dir "$OUT/cal" --json > "$OUT/mma-warps.json" \
  2> "$OUT/mma-warps.err"
cp "$OUT"/cal/calibration.json "$OUT/mma-warps-raw.json" 2>/dev/null
rm -rf "$OUT/cal"
timeout 330 python3 -m flashsim.cli validate --grid fa2 --max-minutes "${VALIDATE_MINUTES:-4.5}" --measure-only \
  --out-dir "$OUT/val" --ncu-seqlens 2048,8192 2>&1 | tail -5
cp "$OUT"/val/validation-measured.jsonl "$OUT/" 2>/dev/null
rm -rf "$OUT/val"
ls -la "$OUT"
