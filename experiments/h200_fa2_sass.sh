#!/usr/bin/env bash
# What SDPA's flash (FA2) kernel issues, beside our v2 on the same schedule (bash experiments/h200_fa2_sass.sh;
# about 4 minutes). Two views:
#   1. static: the sm_90 SASS of FA2's forward kernels, taken out of PyTorch's libtorch_cuda.so with cuobjdump,
#      counted per instruction class and per loop body by experiments/sass_counts.py (fa2-sass-counts.json),
#      with the SASS of the forward kernels themselves (fa2-fwd.sass.gz);
#   2. dynamic: Nsight Compute's full set, with executed instructions and stall samples per SASS instruction,
#      for SDPA flash and our v2 at development shapes (bf16, the FA2 grid's batch x heads): 4k at d128, d64,
#      and d128 causal (ncu-{impl}-d{D}-n{N}-c{C}{,-details,-sass}.txt).
# Run from the repository root with simpy's wheel in .whl/ and our cubins in build/kernels. Everything comes
# back in $OUT/results.tgz, beside fa2-fwd.sass.gz.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source experiments/device_env.sh
source experiments/device_steps.sh
WORK=$(mktemp -d)
LIB=$(python3 -c "import torch, pathlib; print(pathlib.Path(torch.__file__).parent / 'lib' / 'libtorch_cuda.so')")
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
ls -la "$LIB" >> "$OUT/gpu.txt"

fa2_static() {
  # every cubin of the library, then those for sm_90 that hold FA2's forward kernels
  mkdir -p "$WORK/all" "$WORK/fa2" && cd "$WORK/all" || return 1
  cuobjdump -lelf "$LIB" > "$WORK/elves.txt"
  echo "$(grep -c sm_90 "$WORK/elves.txt") of $(wc -l < "$WORK/elves.txt") cubins are sm_90"
  cuobjdump -xelf all "$LIB" > /dev/null 2>&1
  for f in *sm_90*.cubin; do
    grep -q -a "flash_fwd_kernel" "$f" && cp "$f" "$WORK/fa2/"
  done
  echo "$(ls "$WORK/fa2" | wc -l) sm_90 cubins hold flash_fwd_kernel"
  python3 -m flashsim.experiments.sass_counts "$WORK/fa2" --out "$OUT/fa2-sass-counts.json"
  for f in "$WORK"/fa2/*.cubin; do cuobjdump -sass "$f"; done | python3 -c "
import sys
keep = False
for line in sys.stdin:
    if 'Function :' in line:
        keep = 'flash_fwd_kernel' in line
    if keep:
        sys.stdout.write(line)
" | gzip -6 > "$OUT/fa2-fwd.sass.gz"
  rm -rf "$WORK/all"
}
export -f fa2_static
export LIB WORK OUT
step fa2-static 300 bash -c fa2_static

COUNTS=$MMA_SYNC_COUNTS
ncu_configs "flash_fwd_kernel|flashsim_v2" "$COUNTS" "sdpa-flash 128 4096 0" "v2 128 4096 0" "sdpa-flash 64 4096 0" \
  "v2 64 4096 0" "sdpa-flash 128 4096 1" "v2 128 4096 1"
# two files back: the counts and Nsight Compute's pages in results.tgz, the SASS alone (it is large)
cd "$OUT" && tar czf results.tgz --ignore-failed-read fa2-sass-counts.json ncu-*.txt fa2-static.txt gpu.txt \
  summary.txt && rm -f fa2-sass-counts.json ncu-*.txt fa2-static.txt
cd - > /dev/null
finish
