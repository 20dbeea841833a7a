#!/usr/bin/env bash
# What a thread block spends before its first copy, piece by piece (experiments/block_start.py,
# kernels/microbench/block_start.cu): the kernel's first parameter read and a chain of constant-bank reads cold
# and warm, the mbarriers' set-up, setmaxnreg, and the tile scheduler's index arithmetic, on one SM and on all,
# after validate's write flush and in a second launch. Under a minute on an H200:
#     bash experiments/h200_block_start.sh
# Run from the repository root with the cubin in build/kernels (microbenchmark block_start). Everything comes
# back in $OUT.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
step block-start 120 python3 -m flashsim.experiments.block_start --out "$OUT/block-start.json"
finish
