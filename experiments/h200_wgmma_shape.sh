#!/usr/bin/env bash
# wgmma throughput by instruction shape and shared-memory layout (bash experiments/h200_wgmma_shape.sh; about
# 1 minute, at most 7): `flashsim calibrate --only wgmma_shape,wgmma` times every m64nNk16 bf16 form our v3
# kernel issues (QK^T: both operands in shared memory, N = block_n; PV: A from registers, N = head dim) at each
# swizzle panel width, 1-3 warpgroups per SM (experiments/calibrate_wgmma.py). Then the tidied ifetch probe's
# branch sweep, as a check of its earlier run. Run from the
# repository root with simpy's wheel in .whl/ and the cubins built (flashsim kernels build --out build/kernels
# --arch sm_90a). Everything comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step wgmma-shape 150 python3 -m flashsim.cli calibrate --only wgmma_shape,wgmma --out-dir "$OUT/cal" --json
cp "$OUT/cal/calibration.json" "$OUT/wgmma-shape.json" 2>/dev/null
python3 - "$OUT/wgmma-shape.json" <<'PY' | tee "$OUT/wgmma-shape-table.txt"
import json, sys
r = json.load(open(sys.argv[1]))["results"]
for p in r.get("wgmma_shape", {}).get("points", []):
    rate = p.get("flops_per_clk_per_sm")
    cell = f"{rate:8.0f}" if rate else "  skipped"
    print(f"{p['form']} n{p['n']:<4} w{p['swizzle_bytes']:<4} wg{p['warpgroups_per_sm']}  {cell}")
print("m64n256k16 reference:", r.get("wgmma", {}).get("bf16_flops_per_clk_per_sm"))
PY
step ifetch-branch 240 python3 -m flashsim.experiments.ifetch_probe --sweep branch --out "$OUT/ifetch"
cd "$OUT" && tar czf results.tgz --ignore-failed-read wgmma-shape.json wgmma-shape-table.txt ifetch \
  gpu.txt summary.txt
cd - > /dev/null
finish
