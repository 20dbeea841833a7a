#!/usr/bin/env bash
# Nsight Compute on the LLM-shaped development set's short rows (b2-h24-kv12-n256-d64 and b1-h8-n1024-d96,
# causal and not) for our v2 and v3, SDPA flash and cuDNN: where a kernel of 8-30 us spends its time. Run from
# the repository root with simpy's wheel in .whl/ and the cubins in build/kernels; OUT is where the CSVs go.
set -uo pipefail
source experiments/device_env.sh
M=gpu__time_duration.sum,gpc__cycles_elapsed.max,sm__cycles_active.max,sm__cycles_active.avg,sm__cycles_active.min
M+=,sm__cycles_elapsed.avg.per_second,smsp__cycles_active.avg,sm__ctas_launched.sum,sm__ctas_launched.max
M+=,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active
M+=,smsp__average_warp_latency_per_inst_issued.ratio,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct
M+=,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_no_instruction_per_warp_active.pct
M+=,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct
M+=,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct
M+=,smsp__warp_issue_stalled_membar_per_warp_active.pct,smsp__warp_issue_stalled_sleeping_per_warp_active.pct
for impl in v2 v3 sdpa-flash sdpa-cudnn; do
  for cfg in "64,256,1,2,24,12" "64,256,0,2,24,12" "96,1024,1,1,8,8" "96,1024,0,1,8,8"; do
    name="$impl-${cfg//,/-}"
    timeout 60 ncu --clock-control none --metrics "$M" --kernel-name "regex:(flashsim_v2|flash_fwd|v3_|cudnn|sm90)" \
      --launch-skip 1 --launch-count 1 --csv python3 -m flashsim.experiments.bench_kernels --profile-target "$impl,$cfg" \
      > "$OUT/ncu-$name.csv" 2> "$OUT/ncu-$name.err"
    echo "$name rc $?"
  done
done
cd "$OUT" && tar czf tiny-ncu.tgz ncu-*.csv ncu-*.err && rm -f ncu-*.csv ncu-*.err
