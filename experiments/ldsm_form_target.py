"""Launches of ldsm_form sweep kernels to profile with Nsight Compute, one per KERNEL:WARPS argument.

    python3 -m flashsim.experiments.ldsm_form_target form_l4x4_m8:8 form_l0x4_m8:8 ...

One block per SM of WARPS warps, 256 x 8 k-steps per warp (kernels/microbench/ldsm_form.cu).
"""

from __future__ import annotations

import sys

from flashsim.errors import FlashsimError


def parse(arg: str) -> tuple[str, int]:
    name, _, warps = arg.partition(":")
    if not warps.isdigit() or not 1 <= int(warps) <= 32:
        raise FlashsimError(f"expected KERNEL:WARPS with 1..32 warps, got {arg!r}")
    return name, int(warps)


def main(argv: list[str]) -> int:
    import numpy as np

    from .calibrate_gpu import load_module, read_gpu, require_gpu

    runs = [parse(a) for a in argv]
    cp = require_gpu("ldsm_form_target")
    gpu = read_gpu(cp)
    module = load_module(cp, "ldsm_form", gpu.arch)
    sink = cp.zeros(1, dtype=cp.float32)
    times = cp.zeros(gpu.sm_count * 40, dtype=cp.uint8)  # one BlockTime (40 bytes) per block
    for name, warps in runs:
        module.get_function(name)((gpu.sm_count,), (32 * warps,), (np.int32(256), sink, times))
    cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
