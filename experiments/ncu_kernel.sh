#!/usr/bin/env bash
# Where one of our kernels' warps wait and what its memory traffic looks like: Nsight Compute's warp-state,
# scheduler, memory and speed-of-light sections, plus store-sector counts, on one call (bf16, batch x heads
# = 16384 / N x 2048 / d, as the FA2 grid). Run from the repository root on the GPU machine with the
# cubins in build/:
#     bash experiments/ncu_kernel.sh ALGO D N CAUSAL [KERNELS]   (e.g. v1 64 2048 0; standard 64 4096 0 3)
# KERNELS: launches per call (standard: 3). Writes $OUT/ncu-ALGO-dD-nN.txt.
set -uo pipefail
ALGO=$1 D=$2 N=$3 CAUSAL=$4 KERNELS=${5:-1}
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
FILE="$OUT/ncu-$ALGO-d$D-n$N.txt"
METRICS=smsp__inst_executed.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_op_ldsm.sum
METRICS+=,sm__cycles_elapsed.avg.per_second,lts__t_sectors_op_write.sum,lts__t_requests_op_write.sum
METRICS+=,lts__t_sectors_op_read.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum
METRICS+=,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,dram__bytes_read.sum,dram__bytes_write.sum
METRICS+=,smsp__average_warp_latency_issue_stalled_barrier.ratio
METRICS+=,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio
timeout 280 ncu --clock-control none --kernel-name "regex:flashsim_$ALGO" --launch-skip "$KERNELS" \
  --launch-count "$KERNELS" --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section SpeedOfLight \
  --metrics "$METRICS" python3 -m flashsim.experiments.bench_kernels --profile-target "$ALGO,$D,$N,$CAUSAL" > "$FILE" 2>&1
grep -E "flashsim_|Warp Cycles Per Issued|Issued Ipc|Eligible Warps|Duration|Throughput|Hit Rate|ratio|sum" \
  "$FILE" | head -90
