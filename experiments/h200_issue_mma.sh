#!/usr/bin/env bash
# The issue model's mma.sync mechanisms against the development sets, and V1's sampled runs against the whole
# chip, on the GPU machine's CPUs (no GPU): bash experiments/h200_issue_mma.sh. Our v2's and SDPA flash's rows
# of the FA2 grid, the LLM-shaped and the per-tile development sets, compared three ways side by side, each
# with the issue model: without the mma.sync pair (an HMMA one scheduler cycle, no share of the pipes: the
# model before it), with it (the profile's), and with it and the loads' latency form (ldsm_model 1); beside
# them the a100 V1 FA2 grid, sampled and whole-chip (experiments/sampling_exactness.py). At most LIMIT seconds
# (default 540); everything in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
LIMIT=${LIMIT:-540}
mkdir -p "$OUT"
source experiments/device_env.sh
source experiments/device_steps.sh
status=0
RES=experiments/results/h200
step v1-sampling "$LIMIT" python3 -m flashsim.experiments.sampling_exactness measure "$OUT/v1-sampling" \
  --profiles a100:v1 --jobs 4 --limit $((LIMIT - 20)) &
for cfg in "before:mma_sync_issue_cycles=1 mma_sync_pipe_steal_fraction=0" "pair:" "pair-latency:ldsm_model=1"; do
  name=${cfg%%:*}
  sets=(--set issue_model=1)
  for kv in ${cfg#*:}; do sets+=(--set "$kv"); done
  for grid_stem in fa2:validation dev-llm:devset-llm dev-tiles:devset-tiles; do
    grid=${grid_stem%%:*} stem=${grid_stem#*:} dir="$OUT/$name/${grid_stem%%:*}"
    mkdir -p "$dir"
    python3 - "$RES/$stem-measured.jsonl" "$dir/$stem-measured.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as src, open(sys.argv[2], "w") as dst:  # session records and our v2's, FA2's rows
    dst.writelines(line for line in src if json.loads(line).get("impl", "v2") in ("v2", "sdpa-flash"))
PY
    step "$name-$grid" $((LIMIT - 20)) python3 -m flashsim.cli validate --grid "$grid" --compare-only --hw h200 \
      --jobs 2 --out-dir "$dir" "${sets[@]}" &
  done
done
wait
grep -q ": exit [1-9]" "$OUT/summary.txt" && status=1  # the steps ran in subshells
tar czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz .
finish
