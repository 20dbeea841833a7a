#!/usr/bin/env bash
# What SDPA's cuDNN forward kernel issues per K/V block, beside our v3 on the same shapes (bash
# experiments/h200_cudnn_sass.sh; about 3 minutes): Nsight Compute's full set, with executed instructions and
# stall samples per SASS instruction, for the cuDNN kernel at development shapes (bf16, the FA2 grid's batch x
# heads at N = 4096: d64 and d128, causal and not) and our v3 at d64 and d128 (ncu-{impl}-d{D}-n{N}-c{C}{,-details,-sass}.txt in $OUT/results.tgz,
# read by `python3 -m flashsim.experiments.ncu_regions`). CONFIGS, "IMPL D N CAUSAL B H" entries separated by ";",
# profiles other shapes instead: e.g. the per-tile development shapes, one K/V block a tile, where cuDNN's loops are
# short: CONFIGS="sdpa-cudnn 64 128 0 8 132;sdpa-cudnn 128 128 0 8 132" bash experiments/h200_cudnn_sass.sh
# Run from the repository root with simpy's wheel in .whl/ and our cubins in build/kernels.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', \
torch.backends.cudnn.version())" >> "$OUT/gpu.txt"
CONFIGS=${CONFIGS:-"sdpa-cudnn 64 4096 0 4 32;sdpa-cudnn 64 4096 1 4 32;sdpa-cudnn 128 4096 0 4 16;\
sdpa-cudnn 128 4096 1 4 16;v3 64 4096 0 4 32;v3 128 4096 0 4 16"}
IFS=";" read -ra configs <<< "$CONFIGS"
ncu_configs "^(cudnn_generated|v3_)" "$WGMMA_COUNTS" "${configs[@]}"
cd "$OUT" && tar czf results.tgz ncu-*.txt gpu.txt summary.txt && rm -f ncu-*.txt
cd - > /dev/null
finish
