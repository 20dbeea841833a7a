#!/usr/bin/env bash
# The form of the ldmatrix / mma.sync interference (bash experiments/h200_ldsm_form.sh; about 1.5 minutes, at
# most 4). flashsim calibrate --only ldsm_form: ldmatrix loads against mma.sync products per warp k-step (0..8
# ldmatrix.x4 per 8 m16n8k16, x2 and x1 loads, 16 products, .trans), loads alone, the same loads and products
# with nothing waiting on a load, loads and products on different warps, ld.shared.v4 in place of ldmatrix.x4,
# and the exact k-steps of our v2 forward and backward GEMMs, each at 4, 8, 12 and 16 warps per SM
# (experiments/calibrate_ldsm.py); with ldsm_mma, mma_warps and smem beside it as the reference points. Then
# Nsight Compute's warp states and pipe counters on a few points (experiments/ldsm_form_target.py). Run from the repository root with simpy's wheel
# in .whl/ and the cubins built (flashsim kernels build --out build/kernels --arch sm_90a). Writes
# $OUT/ldsm-form.json (the calibration report), $OUT/ncu-ldsm-form.txt, gpu.txt and summary.txt.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step ldsm-form-log 150 python3 -m flashsim.cli calibrate --only ldsm_form,ldsm_mma,mma_warps,smem --out-dir "$OUT/cal" --json
cp "$OUT/cal/calibration.json" "$OUT/ldsm-form.json" 2>/dev/null
METRICS=(--metrics smsp__inst_executed_op_ldsm.sum,sm__inst_executed_pipe_tensor_op_hmma.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.max)
POINTS=(form_l0x4_m8:8 form_l4x4_m0:8 form_l2x4_m8:8 form_l4x4_m8:8 form_l8x4_m8:8 form_l8x1_m8:8 form_l4x4_m8:4
        form_l4x4_m8:16 form_l4x4i_m8:8 split_l4x4_m8:8 form_l4v4_m8:8 tile_fwd_s_bn128:8 tile_fwd_pv_d64:8 tile_bwd_tt_32x32:8)
step ncu-ldsm-form 90 ncu --clock-control none --kernel-name "regex:^(form|split|tile)_" --section WarpStateStats \
  --section SchedulerStats "${METRICS[@]}" python3 -m flashsim.experiments.ldsm_form_target "${POINTS[@]}"
python3 - "$OUT/ldsm-form.json" <<'PY' | tee "$OUT/ldsm-form-table.txt"
import json, sys
rows = json.load(open(sys.argv[1]))["results"].get("ldsm_form", {}).get("points", [])
for r in rows:
    c = r.get("cycles_per_warp_kstep")
    cell = f"{c:8.1f}" if c is not None else "  skipped"
    print(f"{r['kernel']:<20} w{r['warps_per_sm']:<3} ldsm {r['ldsm']:>2}x{r['ldsm_x']} mma {r['mma']:>2}  {cell}")
PY
grep -hE "^  [a-z]|Stall|Warp Cycles|Issued Ipc|No Eligible|ldsm|hmma|wavefronts|bank_conflicts|issue_active|cycles_elapsed" \
  "$OUT"/ncu-ldsm-form.txt | head -150
finish
