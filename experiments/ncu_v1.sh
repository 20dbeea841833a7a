#!/usr/bin/env bash
# Where the v1 kernel's warps wait: Nsight Compute's warp-state, scheduler, memory and pipe sections on one
# launch (bf16, d64, batch 8, 32 heads, N 2048, FA1 tiles). Run from the repository root on the GPU
# machine with the cubins in build/; writes $OUT/ncu-v1.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-}:$PWD PYTHONUNBUFFERED=1 FLASHSIM_KERNEL_DIR=$PWD/build/kernels
timeout 200 ncu --clock-control none --kernel-name "regex:flashsim_v1" --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section LaunchStats \
  --section Occupancy --section MemoryWorkloadAnalysis --section SpeedOfLight \
  --metrics smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_op_ldsm.sum,sm__cycles_elapsed.avg.per_second,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio \
  python3 -m experiments.bench_kernels --profile-target "v1,64,2048,0" > "$OUT/ncu-v1.txt" 2>&1
grep -E "Stall|Warp Cycles|Issued Ipc|No Eligible|Eligible Warps|Frequency|Duration|Throughput|Hit Rate|ratio" \
  "$OUT/ncu-v1.txt" | head -60
