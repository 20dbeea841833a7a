#!/usr/bin/env bash
# Instruction fetch on an H200 (bash experiments/h200_ifetch.sh), about 2 minutes: experiments/ifetch_probe.py
# times straight-line code new to its SMs (2 to 129 KiB of SASS) and a loop of the same bodies, 1 and 4 warps
# per block, one block and one per SM, after the L2 flush and after a warm-up launch: the fetch cost our decode
# kernel's short launches stall on (results/h200/decode-fid/ncu/). No attention kernel runs. Run from the
# repository root with simpy's wheel in .whl/ and the microbenchmark cubins (ifetch, membw for the flush)
# built where nvcc is:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Writes under $OUT: gpu.txt, ifetch.txt, ifetch-probe.{json,md}, summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step ifetch 240 python3 -m flashsim.experiments.ifetch_probe --out "$OUT"
finish
