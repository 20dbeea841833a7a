#!/usr/bin/env bash
# What SDPA's cuDNN forward kernel waits for per tile where its loops are short (bash
# experiments/h200_cudnn_short_sass.sh; about a minute): Nsight Compute's full set with executed instructions and
# stall samples per SASS instruction for the per-tile development shapes B8 H132 N128 at d64 and d128 (one K/V block
# a tile), as ncu-sdpa-cudnn-d{D}-n128-c0{,-details,-sass}.txt in $OUT/results.tgz, read by `python3 -m
# flashsim.experiments.wgmma_loop FILE-sass.txt.gz --phases`. Run from the repository root with simpy's wheel in .whl/.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', \
torch.backends.cudnn.version())" >> "$OUT/gpu.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/gpu.txt"
ncu_configs "^cudnn_generated" "$WGMMA_COUNTS" "sdpa-cudnn 64 128 0 8 132" "sdpa-cudnn 128 128 0 8 132"
cd "$OUT" && for f in ncu-*.txt; do gzip -f "$f"; done && tar czf results.tgz ncu-*.txt.gz gpu.txt summary.txt \
  && rm -f ncu-*.txt.gz
cd - > /dev/null
finish
