#!/usr/bin/env bash
# Instruction fetch with code the SM cannot keep (SWEEPS="pair pattern ahead" bash experiments/h200_ifetch_pair.sh;
# about 1 minute): the fetch microbenchmark's (kernels/microbench/ifetch.cu) ifetch_pair loops of 8-32 KiB, one
# block per SM, two in the same loop, two in different loops; the attention-shaped ifetch_p sweep, one and two
# blocks per SM, causal and not; ifetch_ahead, slow code then fast code new to the SM (how far the fetch runs
# ahead of the warps); and every kernel's SASS size. Causal attention blocks on one SM run different stretches
# of their code at once; this measures what that costs when the two together overflow the ~32 KiB an SM keeps.
# Run from the repository root with simpy's wheel in .whl/. Everything comes back under $OUT.
set -uo pipefail
source experiments/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
for sweep in ${SWEEPS:-pair pattern ahead}; do
  python3 -m flashsim.experiments.ifetch_probe --sweep "$sweep" --out "$OUT/ifetch-$sweep" > "$OUT/ifetch-$sweep.log" 2>&1
  tail -n 1 "$OUT/ifetch-$sweep.log"
done
cuobjdump -sass "$FLASHSIM_KERNEL_DIR/microbench/ifetch.sm_90a.cubin" | python3 -c '
import re, sys, json
cur, out = None, {}
for line in sys.stdin:
    m = re.search(r"Function : (\S+)", line)
    if m:
        cur = m.group(1); out[cur] = {"instructions": 0, "ffma": 0}
    elif cur and re.search(r"/\*[0-9a-f]{4,}\*/\s+\S", line):
        out[cur]["instructions"] += 1
        out[cur]["ffma"] += " FFMA " in line
json.dump(out, sys.stdout, indent=1)' > "$OUT/ifetch-sass-counts.json"
