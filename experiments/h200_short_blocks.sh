#!/usr/bin/env bash
# Where short blocks spend their time: development shapes whose blocks visit one to four K/V tiles (the
# per-tile and LLM-shaped sets' N 256 causal rows, where our v2 and SDPA flash run 20-29% slower than
# predicted, beside N 512, where the same kernel is predicted within 1%) and one long-K/V, one-Q-block shape
# (B8 H132 N128 Nk8192 d128, -13.5%). Per configuration Nsight Compute's warp-state, scheduler, launch,
# occupancy and speed-of-light sections with per-SASS stall samples, plus the warps' lifetimes
# (sm__warps_active.sum / smsp__warps_launched.sum cycles), which the simulator's block lifetimes are held
# to. Then `flashsim calibrate --only xblock_fill` (fills across two blocks of an SM). About 6 minutes on an
# H200:
#     bash experiments/h200_short_blocks.sh
# Run from the repository root with simpy's wheel in .whl/ and the cubins in build/kernels (v2 and the
# microbenchmarks). Everything comes back in $OUT.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
LIFE=gpu__time_duration.sum,sm__warps_active.sum,smsp__warps_launched.sum,sm__ctas_launched.sum
LIFE+=,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second
LIFE+=,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum
# NAME IMPL D N CAUSAL B H HKV [NK]
CONFIGS=(
  "v2-d64-n256-c v2 64 256 1 16 48 6"
  "v2-d64-n512-c v2 64 512 1 16 48 6"
  "v2-d128-n256-c-b49 v2 128 256 1 49 48 6"
  "v2-d128-n256-c-b16 v2 128 256 1 16 48 6"
  "v2-d128-n128-k8192 v2 128 128 0 8 132 132 8192"
  "fa2-d64-n256-c sdpa-flash 64 256 1 16 48 6"
  "fa2-d128-n256-c-b49 sdpa-flash 128 256 1 49 48 6"
)
for cfg in "${CONFIGS[@]}"; do
  set -- $cfg
  name=$1 impl=$2
  kernels="flashsim_v2"
  [ "$impl" = sdpa-flash ] && kernels="flash_fwd"
  step "ncu-$name" 120 ncu --clock-control none --import-source no --section WarpStateStats \
    --section SchedulerStats --section LaunchStats --section Occupancy --section SpeedOfLight \
    --section SourceCounters --metrics "$LIFE" --kernel-name "regex:$kernels" --launch-skip 1 --launch-count 1 \
    -f -o "$OUT/$name" python3 -m flashsim.experiments.bench_kernels --profile-target "$2,$3,$4,$5,$6,$7,$8,${9:-}"
  step "ncu-$name-details" 30 ncu -i "$OUT/$name.ncu-rep" --print-details all
  step "ncu-$name-sass" 40 ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass
  rm -f "$OUT/$name.ncu-rep"
done
step xblock-fill 150 python3 -m flashsim.cli calibrate --only xblock_fill --out-dir "$OUT/cal" --json
finish
