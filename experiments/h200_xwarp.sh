#!/usr/bin/env bash
# Two inputs for the GEMM replay candidate (session28/candidate-gemm-replay): what combining row statistics
# across V1's warps through shared memory costs (`flashsim calibrate --only xwarp`, kernels/microbench/xwarp.cu),
# and the ldmatrix / mma.sync issue order of every sm_90 forward kernel of SDPA's flash in PyTorch's
# libtorch_cuda.so (cuobjdump, then experiments/sass_orders.py; fa2-gemm-orders-all.json.gz). From the
# repository root with simpy's wheel in .whl/ (the cubin builds there, or comes in build/kernels); about two
# minutes on an H200.
set -uo pipefail
export OUT=$(mkdir -p "${OUT:-out}" && cd "${OUT:-out}" && pwd)
source experiments/device_env.sh && source experiments/device_steps.sh
LIB=$(python3 -c "import torch, pathlib; print(pathlib.Path(torch.__file__).parent / 'lib' / 'libtorch_cuda.so')")
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/gpu.txt"
step xwarp 120 python3 -m flashsim.cli calibrate --only xwarp --out-dir "$OUT/cal"
fa2_orders() {
  local work
  work=$(mktemp -d) && cd "$work" || return 1
  cuobjdump -xelf all "$LIB" > /dev/null 2>&1
  for f in *sm_90*.cubin; do grep -q -a flash_fwd_kernel "$f" && cuobjdump -sass "$f"; done > fa2.sass
  python3 -m flashsim.experiments.sass_orders fa2.sass --gemms --match flash_fwd_kernel | gzip -6 \
    > "$OUT/fa2-gemm-orders-all.json.gz"
  cd - > /dev/null && rm -rf "$work"
}
export -f fa2_orders
export LIB
step fa2-orders 300 bash -c 'cd '"$PWD"' && fa2_orders'
finish
