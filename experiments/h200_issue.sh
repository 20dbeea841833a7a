#!/usr/bin/env bash
# The instruction-issue model's measurements on an H200, in about 3 minutes: the dependent-instruction
# latencies it assumes until measured (MUFU.EX2 and SHFL.BFLY chains, `flashsim calibrate --only dep_latency`,
# with fp32_mufu again for the FFMA chain beside them), and Nsight Compute's issue-slot, pipe and stall
# numbers of our v2 and v3 kernels on one development-set point (bf16, d128, batch 4, 16 heads, N 4096), to
# check the model's per-warp issue against. Run from the repository root with simpy's wheel in .whl/ and the
# cubins (microbenchmarks included) in build/kernels:
#   flashsim kernels build --out build/kernels --arch sm_90a
# Writes under $OUT: gpu.txt, dep-latency.json (parameters), dep-latency-raw.json, ncu-v2.txt, ncu-v3.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
timeout 120 python3 -m flashsim.cli calibrate --only dep_latency,fp32_mufu --out-dir "$OUT/cal" --json \
  > "$OUT/dep-latency.json" 2> "$OUT/dep-latency.err"
cp "$OUT"/cal/calibration.json "$OUT/dep-latency-raw.json" 2>/dev/null
rm -rf "$OUT/cal"
cat "$OUT/dep-latency.json"
METRICS=smsp__inst_executed.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_alu.sum
METRICS+=,smsp__inst_executed_pipe_xu.sum,smsp__inst_executed_pipe_tensor.sum,smsp__inst_executed_pipe_lsu.sum
METRICS+=,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second
METRICS+=,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio
METRICS+=,smsp__average_warp_latency_issue_stalled_wait.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio
METRICS+=,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio
METRICS+=,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,smsp__average_warp_latency_issue_stalled_not_selected.ratio
METRICS+=,smsp__average_warp_latency_issue_stalled_selected.ratio,smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio
for algo in v2 v3; do
  timeout 100 ncu --clock-control none --kernel-name "regex:(flashsim_v2|v3_)" --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --metrics "$METRICS" \
    python3 -m flashsim.experiments.bench_kernels --profile-target "$algo,128,4096,0" > "$OUT/ncu-$algo.txt" 2>&1
  grep -E "Warp Cycles Per Issued|Issue Slots Busy|Eligible Warps|inst_executed|ratio" "$OUT/ncu-$algo.txt" | head -30
done
ls -la "$OUT"
