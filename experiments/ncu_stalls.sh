#!/usr/bin/env bash
# Where the warps of FA2-class (mma.sync) and FA3-class (wgmma) kernels wait: Nsight Compute's warp-state,
# scheduler and pipe-utilisation sections on one launch each (bf16, d128, batch 4, 16 heads, N 4096).
# Run from the repository root on the GPU machine with the cubins in build/; writes $OUT/ncu-*.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
SECTIONS=(--section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section LaunchStats
          --section Occupancy --metrics smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_op_ldsm.sum,sm__cycles_elapsed.avg.per_second)
for target in v2 sdpa-flash; do
  timeout 150 ncu --clock-control none --kernel-name "regex:(flashsim_v2|flash_fwd_kernel)" --launch-skip 1 \
    --launch-count 1 "${SECTIONS[@]}" python3 -m flashsim.experiments.bench_kernels --profile-target "$target,128,4096,0" \
    > "$OUT/ncu-$target.txt" 2>&1
done
cat > /tmp/one_v3.py <<'PY'
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from kernels import hopper
q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for _ in range(2):
    hopper.attention(q, k, v)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
PY
timeout 150 ncu --clock-control none --kernel-name "regex:(v3|cudnn|sm90)" --launch-skip 2 --launch-count 2 \
  "${SECTIONS[@]}" python3 /tmp/one_v3.py > "$OUT/ncu-v3-cudnn.txt" 2>&1
grep -E "Profiling|Stall|Warp Cycles|Issued Ipc|Issue Slots|No Eligible|Eligible Warps|SM Frequency|Duration|pipe|ldsm" \
  "$OUT"/ncu-*.txt | head -120
