#!/usr/bin/env bash
# Head dims 96, 192 and 256 of the Hopper kernels on an H200 (bash experiments/h200_headdims.sh), in about
# a minute (54 s measured): every GPU test of tests/test_hopper.py (v3 bf16/fp16 and v3-fp8 at d64..d256:
# fp64 reference, causal or not, odd lengths, GQA, the fp8 error study), compute-sanitizer memcheck over v3
# and v3-fp8 (d64..d256, tests/test_kernels_sanitizer.py), then a forward throughput table at d96, d192 and
# d256 (seqlen 1k..16k, batch = 16k / seqlen, heads = 2048 // d): our v3 and v3-fp8 beside SDPA's cuDNN and
# flash backends, and d96's other tile (128x144) in the JSON. Run from the repository root with simpy's
# wheel in .whl/ and the cubins built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Writes under $OUT: gpu.txt, hopper.txt and sanitizer.txt (pytest), bench.txt (its log), hopper-headdims.json
# and .md (the table) and summary.txt (one line per step, then PASS or FAIL).
set -uo pipefail
OUT=${OUT:-out/headdims}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step hopper 240 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/test_hopper.py
step sanitizer 150 python3 -m pytest -q -rfE -p no:cacheprovider tests/test_kernels_sanitizer.py -k hopper
step bench 200 python3 -m flashsim.experiments.bench_hopper bench --headdims 96 192 256 \
  --seqlens 1024 2048 4096 8192 16384 --alt-tile --name hopper-headdims --out "$OUT"
finish
