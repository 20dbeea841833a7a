"""A thread block's first tensor-map copies, taken apart (kernels/microbench/tma_first.cu).

Our v3's first copy of Q lands 2.5-3.1 k cycles after its issue when validate's write flush came before the
launch, 0.9-1.3 k when the same kernel ran just before (phase stamps, session 32), where a copy of the same
bytes from a warm L2 takes a few hundred. This times five copies of one 8 KiB box per block, one after another:
a tensor map's first use with cold data, the same map again on other cold rows, a second map's first use, the
first rows again (map and data warm), and a map held in global memory instead of the parameters. On one SM and
on all of them, after the write flush and in a second launch straight after the first.

    python3 -m flashsim.experiments.tma_first [--out FILE]
writes FILE (default experiments/results/h200/tma-first.json) and prints each point's median cycles.
"""

from __future__ import annotations

import ctypes
import statistics
import sys

import numpy as np

REPS = 7
BLOCKS = (1, 132)
PROTOCOLS = ("write flush", "relaunch")
ROWS_PER_BLOCK, BOX = 256, 64  # as tma_first.cu
COPIES = ("map_first", "map_again", "second_map_first", "warm", "global_map_first")


def _maps(cp, driver, rows: int):
    """Three bf16 tensors of `rows` x 64 and a tensor map of each (64 x 64 boxes, 128-byte swizzle); the
    third map copied into global memory."""
    tensors = [cp.zeros((rows, 64), dtype=cp.uint16) for _ in range(3)]
    maps = [driver.TensorMap(t.data.ptr, 2, True, [64, rows], [128], [BOX, BOX]) for t in tensors]
    in_global = cp.asarray(np.frombuffer(ctypes.string_at(maps[2].address, 128), dtype=np.uint8))
    return tensors, maps, in_global


def measure(cp, driver, fn, flush, blocks: int, protocol: str) -> dict:
    tensors, maps, in_global = _maps(cp, driver, blocks * ROWS_PER_BLOCK)
    out = cp.zeros(blocks * 8, dtype=cp.int64)

    def launch():
        fn.launch((blocks, 1, 1), 32, 0, 0, maps[0].address, maps[1].address, ctypes.c_void_p(in_global.data.ptr),
                  ctypes.c_void_p(out.data.ptr))

    samples = []
    for _ in range(REPS):
        if protocol == "write flush":
            flush()
        else:
            launch()
        launch()
        cp.cuda.Device().synchronize()
        samples.append(out.get().reshape(blocks, 8))
    row = {"blocks": blocks, "start": protocol}
    for k, name in enumerate(COPIES):
        per_call = [float(np.median(s[:, k])) for s in samples]
        row[name] = {"median": statistics.median(per_call), "calls": per_call}
    del tensors
    return row


def describe(row: dict) -> str:
    values = "  ".join(f"{k} {row[k]['median']:6.0f}" for k in COPIES)
    return f"{row['start']:11} on {row['blocks']:3} SMs: {values}"


def run(cp, gpu, fn, flush) -> list[dict]:
    from flashsim.kernels import driver

    rows = []
    for protocol in PROTOCOLS:
        for blocks in BLOCKS:
            row = measure(cp, driver, fn, flush, blocks, protocol)
            rows.append(row)
            print(describe(row), flush=True)
    return rows


def main(argv=None) -> int:
    from .calibrate_gpu import tensor_map_main

    return tensor_map_main(argv, "tma_first", __doc__, run)


if __name__ == "__main__":
    sys.exit(main())
