#!/usr/bin/env bash
# O stored from accumulator fragments, as our v3 epilogue stores it (bash experiments/h200_frag_store.sh; about a
# minute): `flashsim calibrate --only frag_store` times kernels/microbench/membw.cu's store_frag, 16 bytes into
# each of 8 rows per warp instruction against the same bytes as coalesced 16-byte words, at 4, 8 and 16 warps
# per SM, into L2 and into HBM. Run from the repository root with simpy's wheel in .whl/ and the microbenchmark
# cubins built (flashsim kernels build --out build/kernels --arch sm_90a). Everything comes back in
# $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step frag-store 120 python3 -m flashsim.cli calibrate --only frag_store --out-dir "$OUT/cal" --json
cp "$OUT/cal/calibration.json" "$OUT/frag-store.json" 2>/dev/null
python3 - "$OUT/frag-store.json" <<'PY' | tee "$OUT/frag-store-table.txt"
import json, sys
r = json.load(open(sys.argv[1]))["results"]["frag_store"]
for p in r["points"]:
    print(f"{p['where']:4} w{p['warps']:<3} {p['form']:10} {p['bytes_per_clk_per_sm']:8.1f} B/clk/SM  "
          f"{p['chip_bytes_per_s'] / 1e12:6.2f} TB/s")
for p in r.get("bursts", []):
    print(f"burst w{p['warps']:<2} {p['stores_per_thread']:4d} stores/thread ({p['bytes_per_warp']:6d} B/warp): "
          f"{p['median_warp_cycles']:8.0f} cycles")
PY
cd "$OUT" && tar czf results.tgz --ignore-failed-read frag-store.json frag-store-table.txt frag-store.txt gpu.txt \
  summary.txt && find . -mindepth 1 -maxdepth 1 ! -name results.tgz ! -name frag-store-table.txt -exec rm -rf {} +
cd - > /dev/null
finish
