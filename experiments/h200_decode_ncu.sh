#!/usr/bin/env bash
# Where our decode kernel's short launches spend their time (bash experiments/h200_decode_ncu.sh; about 4
# minutes): Nsight Compute's full set, with the counters and stall samples per SASS instruction, on one launch
# of the split kernel and of the combine at development shapes only (bf16, 32 heads, one query): a lone block
# per K/V head of 1 and of 16 K/V blocks (b1-g8-nk64-s1, b1-g8-nk1024-s1: the start and the per-step costs),
# 256 blocks (b8-g4-nk1024-s4), and the combine after 8 and 33 splits (b1-g8-nk1024-s8, b1-g8-nk131072-s33).
# ncu flushes the caches before each profiled launch. Run from the repository root with simpy's wheel in .whl/
# and the cubins built (flashsim kernels build --out build/kernels --arch sm_90a). Writes $OUT/ncu-*.txt / .csv,
# gpu.txt and summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
COUNTS=$MMA_SYNC_COUNTS
for spec in "fwd 1 8 64 128 1" "fwd 1 8 1024 128 1" "fwd 8 4 1024 128 4" "combine 1 8 1024 128 8" \
            "combine 1 8 131072 128 33"; do
  set -- $spec
  name=$1-b$2-g$3-nk$4-d$5-s$6
  step "ncu-$name" 60 ncu --clock-control none --set full --import-source no --metrics "$COUNTS" \
    --kernel-name "regex:flashsim_decode.*_$1$" --launch-skip 1 --launch-count 1 -f -o "$OUT/$name" \
    python3 -m flashsim.experiments.decode_profile_target "$2" "$3" "$4" "$5" "$6"
  step "ncu-$name-details" 10 ncu -i "$OUT/$name.ncu-rep" --print-details all
  step "ncu-$name-raw" 10 ncu -i "$OUT/$name.ncu-rep" --page raw --csv
  step "ncu-$name-sass" 15 ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass
  rm -f "$OUT/$name.ncu-rep"
done
grep -hE "Duration|Elapsed Cycles|SM Active Cycles|Issued Ipc|Eligible|Warp Cycles Per Issued|Stall|SM Frequency" \
  "$OUT"/ncu-*-details.txt | head -120
finish
