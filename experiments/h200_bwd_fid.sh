#!/usr/bin/env bash
# What short and causal backward problems pay that long non-causal ones do not (bash experiments/h200_bwd_fid.sh;
# about 5 minutes, at most 7). First every kernel of the backward timed alone (experiments/bwd_kernel_times.py:
# the development grid, ours and SDPA flash, preprocess / main / dQ conversion; our kernel on one exact wave of
# 132 blocks with 1-12 steps each). Then Nsight Compute's full set on one launch of our main backward kernel
# (bf16, FA2 grid) for causal N 512 (d64, d128), causal 1k (d128), non-causal 512 and 4k (d128), with per-SM
# active cycles (load balance), exported as text: the sections, every metric (raw CSV) and the counters per
# SASS instruction (source page). Run from the repository root with simpy's wheel in
# .whl/ and the cubins built (flashsim kernels build --out build/kernels --arch sm_90a). Writes
# $OUT/bwd-kernel-times.json, $OUT/ncu-*.txt / .csv, gpu.txt and summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
STEPS=${STEPS:-kernel-times,ncu}  # STEPS=kernel-times: the timings alone (about 2 minutes)
[[ $STEPS == *kernel-times* ]] && step kernel-times 170 python3 -m flashsim.experiments.bwd_kernel_times --out "$OUT"
[[ $STEPS == *ncu* ]] || finish
OURS=(--kernel-name "regex:flashsim_v2_bwd.*_bwd$" --launch-skip 1 --launch-count 1)
BALANCE=sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_elapsed.max,smsp__cycles_active.avg
BALANCE+=,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sectors_op_red.sum,lts__t_requests_op_red.sum
BALANCE+=,smsp__inst_executed.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum
BALANCE+=,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_op_ldsm.sum,sm__inst_executed_pipe_tensor_op_hmma.sum
for spec in "64 512 1" "128 512 1" "128 4096 0" "128 1024 1" "128 512 0"; do
  set -- $spec
  name=ours-d$1-n$2-c$3
  step "ncu-$name" 40 ncu --clock-control none --set full --import-source no --metrics "$BALANCE" "${OURS[@]}" \
    -f -o "$OUT/$name" python3 -m flashsim.experiments.bwd_profile_target ours "$1" "$2" "$3"
  step "ncu-$name-details" 10 ncu -i "$OUT/$name.ncu-rep" --print-details all
  step "ncu-$name-raw" 10 ncu -i "$OUT/$name.ncu-rep" --page raw --csv
  step "ncu-$name-sass" 15 ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass
  rm -f "$OUT/$name.ncu-rep"
done
grep -hE "Duration|Elapsed Cycles|SM Active Cycles|Issued Ipc|Eligible|Warp Cycles Per Issued|Stall|cycles_active" \
  "$OUT"/ncu-ours-*-details.txt | head -120
finish
