#!/usr/bin/env bash
# Cycles or clock: where short one-wave kernels (6-13 us; all four implementations about 1.5 us slower than
# predicted on development shapes) lose their time. Development shapes only. Three parts, about 5 minutes on
# an H200 in all:
#   1. Nsight Compute per kernel (caches flushed, the clock left free): elapsed and active SM cycles, the clock,
#      instructions, warp-state and scheduler statistics (ncu/);
#   2. busy_protocol: the same calls timed under validate's write flush, a read flush and warm, the SM clock
#      probed before and after each group (busy-clock.{json,txt});
#   3. per-SASS-instruction warp stall sampling (every 32 cycles) of our v2 and cuDNN at one-wave shapes and of
#      our v2 at a multi-wave one, for where in the code the warps wait (sass/).
#     bash experiments/h200_short_cycles.sh
# Run from the repository root with simpy's wheel in .whl/ and the cubins in build/kernels (v2, v3 and the
# microbenchmarks membw and page_walk). Everything comes back in $OUT as short-cycles.tgz (the device returns
# a handful of files).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg,sm__cycles_elapsed.avg.per_second
M+=,sm__cycles_active.max,sm__cycles_active.avg,launch__grid_size,smsp__inst_executed.sum
# NAME D N CAUSAL B H HKV [NK]
CONFIGS=(
  "b1-h64-n128-d128 128 128 0 1 64 64"
  "b4-h32-kv8-n128-k512-d64-causal 64 128 1 4 32 8 512"
  "b3-h16-n128-k256-d96-causal 96 128 1 3 16 16 256"
  "b2-h24-kv12-n256-d64-causal 64 256 1 2 24 12"
)
mkdir -p "$OUT/ncu" "$OUT/sass"
for impl in v2 v3 sdpa-flash sdpa-cudnn; do
  for cfg in "${CONFIGS[@]}"; do
    set -- $cfg
    name=$1
    [ "$impl" = sdpa-flash ] && [ "${8:-$3}" != "$3" ] && [ "$4" = 1 ] && continue  # flash refuses causal Nq != Nk
    step "ncu/ncu-$impl-$name" 60 ncu --clock-control none --cache-control all --metrics "$M" \
      --section WarpStateStats --section SchedulerStats --section LaunchStats \
      --kernel-name "regex:flashsim|flash_fwd|v3_|cudnn" --launch-skip 1 --launch-count 1 \
      python3 -m flashsim.experiments.bench_kernels --profile-target "$impl,$2,$3,$4,$5,$6,$7,${8:-}"
  done
done
step busy-clock 200 python3 -m flashsim.experiments.busy_protocol --calls 11 --protocols write,read,warm \
  --out "$OUT/busy-clock.json" b1-h64-n128-d128 b4-h32-kv8-n128-k512-d64-causal b3-h16-n128-k256-d96-causal \
  b2-h24-kv12-n256-d64-causal b16-h48-kv6-n256-d64-causal
sampled() {  # NAME TARGET KERNEL-REGEX
  step "sass/$1" 90 ncu --clock-control none --cache-control all --section WarpStateStats --section SourceCounters \
    --warp-sampling-interval 0 --import-source no --kernel-name "regex:$3" --launch-skip 1 --launch-count 1 \
    -f -o "$OUT/sass/$1" python3 -m flashsim.experiments.bench_kernels --profile-target "$2"
  ncu -i "$OUT/sass/$1.ncu-rep" --page source --csv --print-source sass | gzip > "$OUT/sass/$1-sass.csv.gz"
  ncu -i "$OUT/sass/$1.ncu-rep" --page details --print-details all > "$OUT/sass/$1-details.txt" 2>&1
  rm -f "$OUT/sass/$1.ncu-rep"
}
sampled v2-b1-h64-n128-d128 "v2,128,128,0,1,64,64," flashsim
sampled v2-b2-h24-kv12-n256-d64-causal "v2,64,256,1,2,24,12," flashsim
sampled cudnn-b1-h64-n128-d128 "sdpa-cudnn,128,128,0,1,64,64," cudnn
sampled v2-b16-h48-kv6-n512-d64-causal "v2,64,512,1,16,48,6," flashsim
(cd "$OUT" && tar czf short-cycles.tgz ncu sass busy-clock.* && rm -rf ncu sass)
finish
