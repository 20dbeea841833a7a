#!/usr/bin/env bash
# Our v2 at d96 after its copies stopped computing each chunk's row and column (kernels/include/common.cuh,
# load_tile_async): correctness of every kernel the change touches, the kernel before and after on the
# LLM-shaped development set's d96 shapes in one session (with SDPA's flash beside them), the test set's d96
# rows timed again for the changed kernel, Nsight Compute on the d96 development shape, and the SASS counts
# of the rebuilt cubins (bash experiments/h200_v2_d96.sh, about 9 minutes on an H200). The kernel before
# runs from a copy of the tree before the change in .probe/old with its cubin in .probe/kernels-old (OLD=0
# skips it). Run from the repository root with simpy's wheel in .whl/ and the cubins built where nvcc is:
# flashsim kernels build --out build/kernels --arch sm_90a. Everything comes back in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:-out}
OLD=${OLD:-1}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
step gpu-tests 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_gpu.py \
  -k "other_headdims or causal_is_bottom_right"
measure() {  # NAME GRID IMPLS [env...]: the grid's d96 rows, timed only
  local name=$1 grid=$2 impls=$3
  shift 3
  step "$name" 200 env "$@" python3 -m flashsim.cli validate --grid "$grid" --impls "$impls" --headdims 96 \
    --measure-only --no-ncu --max-minutes 3 --out-dir "$OUT/$name"
}
if [ "$OLD" = 1 ]; then
  mkdir -p /tmp/site-old && ln -sfn "$PWD/.probe/old" /tmp/site-old/flashsim
  measure dev-old dev-llm v2 PYTHONPATH=/tmp/site-old:/tmp/site FLASHSIM_KERNEL_DIR="$PWD/.probe/kernels-old"
fi
measure dev-new dev-llm v2,sdpa-flash
measure test-new test v2
step sass-counts 120 python3 -m flashsim.experiments.sass_counts build/kernels --out "$OUT/sass-counts.json"
COUNTS=$MMA_SYNC_COUNTS
ncu_configs "flashsim_v2" "$COUNTS" "v2 96 4096 0 4 16"
step sanitizer 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_sanitizer.py -k sanitizer_clean
cd "$OUT" && tar czf results.tgz --ignore-failed-read ./*.txt ./*.json dev-old dev-new test-new && \
  rm -rf ncu-*.txt dev-old dev-new test-new sass-counts.json
cd - > /dev/null
finish
