#!/usr/bin/env bash
# The v3 consumer's softmax beside tensor-core work (bash experiments/h200_softmax_gemm.sh; about 1 minute, at
# most 4): `flashsim calibrate --only softmax_gemm,softmax_mix` runs kernels/microbench/softmax_gemm.cu (GEMM
# and softmax warpgroups in one block, each timing its own span) and the softmax alone beside it; then Nsight
# Compute's full set of the one-GEMM, two-softmax mixes (wgmma SS and mma.sync). Run from the repository root with simpy's wheel in
# .whl/ and the cubins built (flashsim kernels build --out build/kernels --arch sm_90a). Everything comes back
# in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step softmax-gemm 200 python3 -m flashsim.cli calibrate --only softmax_gemm,softmax_mix --out-dir "$OUT/cal" --json
cp "$OUT/cal/calibration.json" "$OUT/softmax-gemm.json" 2>/dev/null
python3 - "$OUT/softmax-gemm.json" <<'PY' | tee "$OUT/softmax-gemm-table.txt"
import json, sys
r = json.load(open(sys.argv[1]))["results"]
for p in r.get("softmax_gemm", {}).get("points", []):
    gemm = p.get("gemm_flops_per_clk_per_sm")
    soft = p.get("softmax_cycles_per_iteration")
    gemm = "-" if gemm is None else f"{gemm:.0f}"
    soft = "-" if soft is None else f"{soft:.1f}"
    print(f"{p['kernel']:<14} inside {p['inside']:<8} gemm {gemm:>6}  softmax {soft:>8}  spans "
          f"{p.get('gemm_span_cycles')} {p.get('softmax_span_cycles')}")
PY
ncu_microbench softmax_gemm sg_g1_w2_ss sg_g1_w2_mma
gzip -f "$OUT"/ncu-*-sass.txt "$OUT"/ncu-*-details.txt 2>/dev/null
cd "$OUT" && tar czf results.tgz --ignore-failed-read softmax-gemm.json softmax-gemm-table.txt softmax-gemm.txt \
  ncu-* gpu.txt summary.txt
cd - > /dev/null
finish
