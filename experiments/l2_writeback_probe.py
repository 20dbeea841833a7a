"""How much of what a kernel stores reaches DRAM before the kernel ends (run under Nsight Compute).

One write_cg launch per footprint (8..128 MiB, one pass, 528 blocks x 512 threads); run as
    ncu --clock-control none --kernel-name write_cg --metrics dram__bytes_write.sum,lts__t_bytes.sum \\
        python3 -m flashsim.experiments.l2_writeback_probe
and compare each launch's dram__bytes_write.sum with its footprint: a write-back L2 that held every dirty
line to the end would show 0 below the L2 size.
"""

from __future__ import annotations

import numpy as np
from flashsim.experiments.calibrate_gpu import compile_cubin, require_gpu

MiB = 1 << 20
FOOTPRINTS_MIB = (8, 16, 32, 48, 64, 96, 128)


def main() -> None:
    cp = require_gpu("the L2 write-back probe")  # cupy, imported here: a clear error where it is missing
    module = cp.RawModule(path=str(compile_cubin("membw", "sm_90a")))
    write = module.get_function("write_cg")
    read = module.get_function("read_cg")
    dst = cp.empty(max(FOOTPRINTS_MIB) * MiB // 4, dtype=cp.uint32)
    times = cp.zeros(528 * 40, dtype=cp.uint8)
    flush = cp.ones(256 * MiB // 4, dtype=cp.uint32)
    sink = cp.zeros(1, dtype=cp.uint32)
    for mib in FOOTPRINTS_MIB:
        # reading 256 MiB leaves L2 full of clean lines: the write's evictions then cost no DRAM writes
        read((528,), (512,), (flush, np.uint64(256 * MiB // 16), np.int32(1), sink, times))
        cp.cuda.runtime.deviceSynchronize()
        write((528,), (512,), (dst, np.uint64(mib * MiB // 16), np.int32(1), times))
        cp.cuda.runtime.deviceSynchronize()
        print(f"footprint {mib} MiB written")


if __name__ == "__main__":
    main()
