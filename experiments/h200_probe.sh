#!/usr/bin/env bash
# Evidence for the next modelling steps, from an H200 (bash experiments/h200_probe.sh), in about 5 minutes:
# - static SASS instruction counts by class of every kernel we build (sass-counts.json), for the
#   instruction-issue model;
# - Nsight Compute on short problems (seqlen 1k, d64 and d128, causal), our v3 beside SDPA's cuDNN kernel: grid,
#   block, registers, shared memory, occupancy, warp stalls and speed of light (ncu-short-*.txt), for the
#   small-problem gap. Run from the repository root with the cubins in build/kernels; writes under $OUT.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
timeout 120 python3 -m flashsim.experiments.sass_counts build/kernels --out "$OUT/sass-counts.json"
SECTIONS=(--section LaunchStats --section Occupancy --section WarpStateStats --section SpeedOfLight
          --section SchedulerStats)
for d in 64 128; do
  for impl in v3 sdpa-cudnn; do
    timeout 90 ncu --clock-control none --target-processes all -k "regex:^v3_|flashsim|sdpa|fmha|flash|cudnn" \
      --launch-count 2 "${SECTIONS[@]}" \
      python3 -m flashsim.experiments.bench_kernels --profile-target "$impl,$d,1024,1" \
      >> "$OUT/ncu-short-d$d.txt" 2>&1
  done
done
ls -la "$OUT"
