#!/usr/bin/env bash
# The SM clock under sustained load (bash experiments/h200_power.sh; about 1.5 minutes, at most 5): `flashsim
# calibrate --only power_mix,clock` runs mixes of tensor-core (wgmma or mma.sync), MUFU and FFMA work at set
# shares of every SM's cycles and reads the clock power management settles at, with nvidia-smi's power and
# clock-event reasons beside it (experiments/calibrate_power.py); then the clock and power of our kernels and
# SDPA's on development shapes, called back to back (experiments/kernel_clocks.py). Run from the repository
# root with simpy's wheel in .whl/ and the cubins built (flashsim kernels build --out build/kernels --arch
# sm_90a). Everything comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
nvidia-smi -q -d POWER,CLOCK,PERFORMANCE > "$OUT/smi-power.txt" 2>&1
step power-mix 150 python3 -m flashsim.cli calibrate --only power_mix,clock --out-dir "$OUT/cal" --json
cp "$OUT/cal/calibration.json" "$OUT/power-mix.json" 2>/dev/null
python3 - "$OUT/power-mix.json" <<'PY' | tee "$OUT/power-mix-table.txt"
import json, sys
r = json.load(open(sys.argv[1]))["results"]
for p in r.get("power_mix", {}).get("points", []):
    print(f"{p['tensor']:<8} k{p['tensor_per_period']:<4} mufu{p['mufu_per_thread']:<4} ffma{p['ffma_per_thread']:<5}"
          f" {p['clock_hz'] / 1e9:6.3f} GHz  tensor {p['tensor_flops_per_clk_per_sm']:6.0f}  mufu {p['mufu_per_clk_per_sm']:5.2f}"
          f"  fp32 {p['fp32_flops_per_clk_per_sm']:6.1f}  x{p['overrun']:.2f}  {p.get('smi_power_w', 0):4.0f} W"
          f"  {p.get('smi_clock_mhz', 0):5.0f} MHz {p.get('smi_event_reasons')}")
print("clock under wgmma load:", r.get("clock"))
PY
step kernel-clocks 120 python3 -m flashsim.experiments.kernel_clocks --out "$OUT/kernel-clocks.json"
cd "$OUT" && tar czf results.tgz --ignore-failed-read power-mix.json power-mix-table.txt kernel-clocks.json \
  kernel-clocks.txt smi-power.txt gpu.txt summary.txt
cd - > /dev/null
finish
