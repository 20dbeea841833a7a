#!/usr/bin/env bash
# What a cuDNN SDPA call puts on the GPU besides its kernel, and two kernels' code (bash
# experiments/h200_call_events.sh; about 5 minutes):
#   1. call-events.json: `experiments.call_events` over every development shape of cuDNN's rows (the FA2 grid,
#      LLM-shaped, per-tile and d256 reports), each piece of each call timed with validate's protocol, and the
#      cudaMemsetAsync microbenchmark (4 B to 64 MiB after the same flush);
#   2. Nsight Compute's full set with the SASS source page for cuDNN's d256 kernel (development shape B4 H16
#      N2048) and SDPA flash's d96 causal kernel (B4 H16 N4096), for their tiles and code lines.
# Run from the repository root with simpy's wheel in .whl/. Everything comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', \
torch.backends.cudnn.version())" >> "$OUT/gpu.txt"
R=experiments/results/h200
step call-events 240 python3 -m flashsim.experiments.call_events --impls sdpa-cudnn --memset \
  --from-report $R/validation.json $R/devset-llm.json $R/devset-tiles.json $R/devset-d256.json \
  --out "$OUT/call-events.json"
ncu_configs "^(cudnn_generated|flash_fwd)" "$WGMMA_COUNTS" "sdpa-cudnn 256 2048 0 4 16" "sdpa-flash 96 4096 1 4 16"
pack_results 'call-events.json' 'ncu-*' 'gpu.txt' '*.txt'
finish
