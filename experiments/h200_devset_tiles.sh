#!/usr/bin/env bash
# What a tile costs beyond its K/V iterations (bash experiments/h200_devset_tiles.sh; about 6 minutes): the
# per-tile development set (`flashsim validate --grid dev-tiles`: one 128-row Q tile per head over 1056 heads
# against 128-8192 keys, and short causal GQA problems) timed for our v2 and v3 and SDPA's flash and cuDNN;
# Nsight Compute's full set with per-SASS stall samples of our v3 and v2 on a short causal shape (B16 H48 N256
# d128, without GQA: the profiling target takes none); then the model against the new set on the machine's
# CPUs (NO_NCU=1 leaves Nsight Compute out). Run from the repository root with simpy's wheel in .whl/ and the cubins in build/kernels. Everything
# comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT/tiles"
source experiments/device_env.sh
source experiments/device_steps.sh
step devset-tiles 240 python3 -m flashsim.cli validate --grid dev-tiles --measure-only --no-ncu --max-minutes 3 \
  --out-dir "$OUT/tiles"
[ -n "${NO_NCU:-}" ] || ncu_configs "^(v3_|flashsim_v2)" "smsp__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg.per_second" \
  "v3 128 256 1 16 48" "v2 128 256 1 16 48"
gzip -f "$OUT"/ncu-*-sass.txt "$OUT"/ncu-*-details.txt 2>/dev/null
step compare-tiles 150 python3 -m flashsim.cli validate --grid dev-tiles --compare-only --hw h200 --jobs 15 \
  --out-dir "$OUT/tiles"
tar czf "$OUT/results.tgz" -C "$OUT" tiles ncu-* summary.txt gpu.txt devset-tiles.txt compare-tiles.txt
# only the archive comes back: the machine returns a handful of files
(cd "$OUT" && find . -mindepth 1 -maxdepth 1 ! -name results.tgz ! -name summary.txt -exec rm -rf {} +)
finish
