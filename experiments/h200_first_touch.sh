#!/usr/bin/env bash
# What a page's first touch after validate's L2 flush costs, apart from attention (first_touch: a pointer
# chase through fresh pages against one page, and one-line-per-thread launches over 1 to 512 pages, each after
# the write flush with and without a primer that touches every page once) and on short development shapes of
# the four implementations (busy_protocol's write+pages: the flush, then every page of torch's memory touched
# once, against the flush alone, the flush and an idle gap, the read flush and warm). About 4 minutes on an
# H200:
#     bash experiments/h200_first_touch.sh
# Run from the repository root with simpy's wheel in .whl/ and the cubins in build/kernels (v2, v3 and the
# microbenchmarks membw and page_walk). Everything comes back in $OUT.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
step first-touch 150 python3 -m flashsim.experiments.first_touch --out "$OUT/first-touch.json"
step busy-pages 330 python3 -m flashsim.experiments.busy_protocol --calls 11 \
  --protocols write,write+pages,write+idle,read,warm --out "$OUT/busy-pages.json" \
  b1-h64-n128-d128 b4-h32-kv8-n128-k512-d64-causal b3-h16-n128-k256-d96-causal b2-h24-kv12-n256-d64-causal \
  b16-h48-kv6-n256-d64-causal b8-h132-n128-k8192-d128
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw --format=csv >> "$OUT/gpu.txt" 2>&1
finish
