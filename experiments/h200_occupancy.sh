#!/usr/bin/env bash
# What a second thread block on the SM costs an mma.sync kernel (development shapes, not of any set): our v2
# and SDPA's flash kernel (FA2) at N = 4224, non-causal, bf16, 4 heads, batch 1 (33 x 4 = 132 blocks: one per
# SM) and batch 2 (264: two per SM, as our kernels run), d128 (128 x 64 tiles, 66 K/V steps) and our v2 at
# d64 (128 x 128, 33 steps); CONFIGS picks others (d256's 64-row tiles fill the SMs with 2 heads). Nsight Compute's full set with the mma.sync counters, its details page and its
# per-SASS source page (CSV) for each, as ncu-IMPL-dD-bB.txt, -details.txt, -sass.txt (bash
# experiments/h200_occupancy.sh; about 4 minutes on an H200). Read by `python3 -m flashsim.experiments.occupancy`.
# Run from the repository root with simpy's wheel in .whl/ and the cubins built (flashsim kernels build --out
# build/kernels --arch sm_90a). Everything comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
# CONFIGS: "IMPL D BATCH HEADS" each (heads 4 is left out of the file names); run 124 ran the default
CONFIGS=${CONFIGS:-"v2 128 1 4,v2 128 2 4,v2 64 1 4,v2 64 2 4,sdpa-flash 128 1 4,sdpa-flash 128 2 4"}
IFS=, read -ra cfgs <<< "$CONFIGS"
runs=()
for cfg in "${cfgs[@]}"; do
  set -- $cfg
  name="$1-d$2-b$3"
  [ "$4" = 4 ] || name="$name-h$4"
  runs+=("$1 $2 4224 0 $3 $4 $name")
done
ncu_configs "flash_fwd_kernel|flashsim_v2" "$MMA_SYNC_COUNTS" "${runs[@]}"
cd "$OUT" && tar czf results.tgz --ignore-failed-read ./*.txt && rm -f ncu-*.txt
cd - > /dev/null
finish
