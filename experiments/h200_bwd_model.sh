#!/usr/bin/env bash
# Where FA2-class backward kernels spend a step (bash experiments/h200_bwd_model.sh; about 4 minutes, at most 8).
# First two microbenchmarks (flashsim calibrate --only ldsm_mma,red_dq; raw numbers in $OUT/ldsm-mma.json):
# ldmatrix-fed mma.sync at the backward's 8 warps per SM, against its products alone and its loads alone (do
# they overlap, as the model assumes?), and the dQ reductions' L2 rate and issue cost. Then Nsight Compute on
# one launch of our v2 backward's main kernel and of SDPA flash's (bf16, FA2 grid, N 4096, d 64 and 128,
# non-causal): warp states, scheduler, pipe utilisation; for d128 also shared-memory wavefronts and bank
# conflicts (ldmatrix, P / dS stores), L2 reductions and HBM bytes. experiments/backward_dev_compare.py predicts
# these kernels ~25% too fast. Run from the repository root with simpy's wheel in .whl/ and the cubins built
# (flashsim kernels build --out build/kernels --arch sm_90a). Writes $OUT/ncu-bwd-*.txt, ldsm-mma.json,
# gpu.txt and summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step ldsm-mma-log 75 python3 -m flashsim.cli calibrate --only ldsm_mma,red_dq,smem,mma_warps --out-dir "$OUT/cal" --json
cp "$OUT/cal/calibration.json" "$OUT/ldsm-mma.json" 2>/dev/null
SECTIONS=(--section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section LaunchStats
          --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables)
# apart from the sections, so that a metric this ncu does not know loses only this run
METRICS=(--metrics smsp__inst_executed_op_ldsm.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_op_shared_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum,smsp__inst_executed_op_global_red.sum,lts__t_requests_op_red.sum,lts__t_sectors_op_red.sum,lts__t_sectors_op_red.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max)
OURS=(--kernel-name "regex:flashsim_v2_bwd.*_bwd$" --launch-skip 1 --launch-count 1)
FA2=(--kernel-name "regex:flash_bwd_dq_dk_dv" --launch-skip 1 --launch-count 1)
TARGET=(python3 -m flashsim.experiments.bwd_profile_target)
for d in 128 64; do
  step "ncu-bwd-ours-d$d" 70 ncu --clock-control none "${OURS[@]}" "${SECTIONS[@]}" "${TARGET[@]}" ours "$d" 4096
  step "ncu-bwd-sdpa-flash-d$d" 70 ncu --clock-control none "${FA2[@]}" "${SECTIONS[@]}" "${TARGET[@]}" sdpa-flash "$d" 4096
done
step ncu-bwd-metrics-ours-d128 60 ncu --clock-control none "${OURS[@]}" "${METRICS[@]}" "${TARGET[@]}" ours 128 4096
step ncu-bwd-metrics-sdpa-flash-d128 60 ncu --clock-control none "${FA2[@]}" "${METRICS[@]}" "${TARGET[@]}" sdpa-flash 128 4096
grep -hE "Profiling|Stall|Warp Cycles|Issued Ipc|No Eligible|Eligible Warps|SM Frequency|Duration|ldsm|wavefronts|bank_conflicts|hmma|red|dram__bytes" \
  "$OUT"/ncu-bwd-*.txt | head -200
finish
