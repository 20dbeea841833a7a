#!/usr/bin/env bash
# Where v3-fp8's time goes at d128 against v3 in bf16 (bash experiments/h200_fp8_pipes.sh, about 1 minute):
# Nsight Compute's compute-workload, instruction and warp-state sections on the second launch of each kernel
# (experiments/fp8_pipes_target.py), then the pipes' utilisation counters. Run from the repository root with
# simpy's wheel in .whl/ and the cubins built (flashsim kernels build --out build/kernels --arch sm_90a).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
NCU=(ncu --clock-control none --kernel-name "regex:^v3_(Bf16|E4m3)_d128" --launch-skip 2 --launch-count 2)
step sections 120 "${NCU[@]}" --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
  --section WarpStateStats --section SchedulerStats python3 -m flashsim.experiments.fp8_pipes_target
step pipes 90 "${NCU[@]}" --metrics gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \
  python3 -m flashsim.experiments.fp8_pipes_target
finish
