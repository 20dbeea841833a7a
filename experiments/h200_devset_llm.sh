#!/usr/bin/env bash
# The LLM-shaped development set measured (bash experiments/h200_devset_llm.sh; about 5 minutes): the 48 shapes
# of results/devset-llm.json (drawn like the test set, from another seed, none of them a test shape) timed for
# our v2 and v3 and SDPA's flash and cuDNN, GPU busy time with the L2 flushed before each call, as the test set
# was. Off-grid development data: where the model's mechanisms may be looked for, so that the test set stays
# untouched. Run from the repository root with simpy's wheel in .whl/ and the cubins in build/kernels.
# Writes $OUT/results.tgz (devset-llm-measured.jsonl and the log) beside gpu.txt and summary.txt.
set -uo pipefail
OUT=${OUT:-out}
MINUTES=${MINUTES:-5.5}
mkdir -p "$OUT/devllm"
source experiments/device_env.sh
source experiments/device_steps.sh
step devset-llm $(( ${MINUTES%.*} * 60 + 90 )) python3 -m flashsim.cli validate --grid dev-llm --measure-only --no-ncu \
  --max-minutes "$MINUTES" --out-dir "$OUT/devllm"
cp "$OUT/devset-llm.txt" "$OUT/devllm/devset-llm-log.txt"
tar czf "$OUT/results.tgz" -C "$OUT" devllm summary.txt gpu.txt && rm -rf "$OUT/devllm" "$OUT/devset-llm.txt"
finish
