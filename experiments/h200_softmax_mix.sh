#!/usr/bin/env bash
# The v3 consumer's elementwise work alone (bash experiments/h200_softmax_mix.sh; about 2 minutes, at most 6):
# `flashsim calibrate --only softmax_mix,dep_warps` times kernels/microbench/softmax_mix.cu (our v3 kernel's
# own softmax, O rescale and P conversion per K/V block, no tensor work) at 1-3 warps per scheduler for each
# v3 tile's (head dim, block_n), with the dependent-chain sweep beside it; then Nsight Compute's full set and
# per-SASS stall samples of two of its kernels (d64 at 3 warps per scheduler, d128 block_n 176 at 2), which is
# how the v3 kernels run their consumers. Run from the repository root with simpy's wheel in .whl/ and the
# cubins built (flashsim kernels build --out build/kernels --arch sm_90a). Everything comes back in
# $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step softmax-mix 150 python3 -m flashsim.cli calibrate --only softmax_mix,dep_warps --out-dir "$OUT/cal" --json
cp "$OUT/cal/calibration.json" "$OUT/softmax-mix.json" 2>/dev/null
python3 - "$OUT/softmax-mix.json" <<'PY' | tee "$OUT/softmax-mix-table.txt"
import json, sys
from flashsim.experiments.calibrate_softmax import compare
from flashsim.hw_profiles import load_profile
r = json.load(open(sys.argv[1]))["results"]
for p in compare(r["softmax_mix"]["points"], load_profile("h200")):
    print(f"d{p['head_dim']:<4} n{p['block_n']:<4} w{p['warps_per_scheduler']}  regs {p['registers']:<4}"
          f"measured {p['cycles_per_iteration']:8.1f}  model {p['model_cycles']:8.1f}  ({p['model_error']:+.1%})")
PY
ncu_microbench softmax_mix softmax_d64_n128_w3 softmax_d128_n176_w2
gzip -f "$OUT"/ncu-*-sass.txt "$OUT"/ncu-*-details.txt 2>/dev/null
cd "$OUT" && tar czf results.tgz --ignore-failed-read softmax-mix.json softmax-mix-table.txt softmax-mix.txt \
  ncu-* gpu.txt summary.txt
cd - > /dev/null
finish
