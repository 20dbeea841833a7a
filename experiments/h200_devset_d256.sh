#!/usr/bin/env bash
# The head-dim-256 development set (bash experiments/h200_devset_d256.sh; about 3 minutes): `flashsim validate
# --grid dev-d256` (12 d256 problems: one to many blocks per SM, causal or not, a GQA and two prefix shapes)
# timed for our v2 and v3 and SDPA's flash and cuDNN, GPU busy time with the L2 flushed before each call. No
# predictions here: the model is compared with it where the simulator runs (`flashsim validate --compare-only
# --grid dev-d256`). Run from the repository root with simpy's wheel in .whl/ and the cubins in build/kernels
# (flashsim kernels build --out build/kernels --arch sm_90a --algo v2 --algo v3). Everything comes back in
# $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT/d256"
source experiments/device_env.sh
source experiments/device_steps.sh
step devset-d256 300 python3 -m flashsim.cli validate --grid dev-d256 --measure-only --no-ncu --max-minutes 4 \
  --out-dir "$OUT/d256"
tar czf "$OUT/results.tgz" -C "$OUT" d256 summary.txt gpu.txt devset-d256.txt
# only the archive comes back: the machine returns a handful of files
(cd "$OUT" && find . -mindepth 1 -maxdepth 1 ! -name results.tgz ! -name summary.txt -exec rm -rf {} +)
finish
