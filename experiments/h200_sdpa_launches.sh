#!/usr/bin/env bash
# What SDPA's cuDNN and flash backends launch on the development grids (bash experiments/h200_sdpa_launches.sh;
# about 2 minutes): kernel names (cuDNN's carry its tile), grid, block, shared memory and registers from the
# profiler's trace, for every shape of the FA2 grid and the LLM-shaped development set. Run from the
# repository root with simpy's wheel in .whl/. Everything comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
for grid in dev-llm fa2; do
  step "launches-$grid" 240 python3 -m flashsim.experiments.sdpa_launches --grid "$grid" --out "$OUT/sdpa-launches-$grid.json"
done
cd "$OUT" && tar czf results.tgz --ignore-failed-read sdpa-launches-*.json *.txt
cd - > /dev/null
finish
