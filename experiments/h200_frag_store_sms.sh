#!/usr/bin/env bash
# Fragment stores on 8..132 SMs (flashsim calibrate --only frag_store_sms); results in $OUT/results.tgz
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step frag-store-sms 150 python3 -m flashsim.cli calibrate --only frag_store_sms --out-dir "$OUT/cal" --json
cp "$OUT/cal/calibration.json" "$OUT/frag-store-sms.json" 2>/dev/null
python3 - "$OUT/frag-store-sms.json" <<'PY' | tee "$OUT/frag-store-sms-table.txt"
import json, sys
r = json.load(open(sys.argv[1]))["results"]["frag_store_sms"]
for p in r["points"]:
    print(f"{p['blocks']:4d} SMs {p['form']:10} {p['bytes_per_clk_per_sm']:8.1f} B/clk/SM {p['chip_bytes_per_s'] / 1e12:6.2f} TB/s")
for p in r["bursts"]:
    print(f"burst {p['blocks']:4d} SMs w{p['warps']} {p['bytes_per_warp']} B/warp: {p['median_warp_cycles']:8.0f} cycles")
PY
cd "$OUT" && tar czf results.tgz --ignore-failed-read frag-store-sms.json frag-store-sms-table.txt frag-store-sms.txt gpu.txt \
  summary.txt && find . -mindepth 1 -maxdepth 1 ! -name results.tgz ! -name frag-store-sms-table.txt -exec rm -rf {} +
cd - > /dev/null
finish
