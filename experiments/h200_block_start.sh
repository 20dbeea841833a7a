#!/usr/bin/env bash
# What a thread block spends before and at its first copies, piece by piece, and what its copies read from HBM:
# - block-start (experiments/block_start.py, kernels/microbench/block_start.cu): the kernel's first parameter read
#   and a chain of constant-bank reads cold and warm, the mbarriers' set-up, setmaxnreg, and the tile scheduler's
#   index arithmetic;
# - tma-first (experiments/tma_first.py): a tensor map's first copies, cold and warm data and map;
# - tma-heads (experiments/tma_heads.py): the HBM read rate of tensor-map copies over attention's layout.
# Each on one SM and on all, after validate's write flush and in a second launch. Under a minute on an H200:
#     bash experiments/h200_block_start.sh
# Run from the repository root with the cubins in build/kernels (microbenchmarks block_start, tma_first,
# tma_heads). Everything comes back in $OUT.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
step block-start 120 python3 -m flashsim.experiments.block_start --out "$OUT/block-start.json"
step tma-first 120 python3 -m flashsim.experiments.tma_first --out "$OUT/tma-first.json"
step tma-heads 180 python3 -m flashsim.experiments.tma_heads --out "$OUT/tma-heads.json"
finish
