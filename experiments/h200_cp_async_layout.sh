#!/usr/bin/env bash
# cp.async into our v2 kernel's d96 shared-memory layout (bash experiments/h200_cp_async_layout.sh; under a
# minute): `flashsim calibrate --only cp_async_layout` copies 64 x 96 tiles with the kernel's mapping into rows
# padded to 208 bytes (the kernel's) or packed at 192, and Nsight Compute counts the copies' shared-memory
# wavefronts in each. Run from the repository root with simpy's wheel in .whl/ and the microbenchmark cubins
# built. Everything comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
step cp-async-layout 120 python3 -m flashsim.cli calibrate --only cp_async_layout --out-dir "$OUT/cal" --json
cp "$OUT/cal/calibration.json" "$OUT/cp-async-layout.json" 2>/dev/null
python3 - "$OUT/cp-async-layout.json" <<'PY' | tee "$OUT/cp-async-layout-table.txt"
import json, sys
for p in json.load(open(sys.argv[1]))["results"]["cp_async_layout"]["points"]:
    print(f"{p['blocks_per_sm']} blocks/SM  rows {p['row_stride_bytes']} B apart: {p['bytes_per_clk_per_sm']:6.1f} B/clk/SM")
PY
step ncu-layout 120 ncu --clock-control none --kernel-name cp_async_d96 --launch-count 2 \
  --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,smsp__sass_inst_executed_op_ldgsts.sum,l1tex__data_bank_writes.sum,smsp__cycles_active.avg \
  python3 -m flashsim.cli calibrate --only cp_async_layout --quick --out-dir "$OUT/cal2"
cd "$OUT" && tar czf results.tgz --ignore-failed-read cp-async-layout.json cp-async-layout-table.txt ncu-layout.txt \
  cp-async-layout.txt gpu.txt summary.txt && find . -mindepth 1 -maxdepth 1 ! -name results.tgz ! -name cp-async-layout-table.txt -exec rm -rf {} +
cd - > /dev/null
finish
