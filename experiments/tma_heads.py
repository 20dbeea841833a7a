"""HBM read bandwidth of tensor-map copies over attention's layout, by the number of heads a row interleaves
(kernels/microbench/tma_heads.cu).

Attention's inputs are (batch, rows, heads, d): one head's row is d x 2 contiguous bytes, the next row of that
head heads x d x 2 bytes further on, and a TMA box of a d128 tile reads box_rows runs of 128 bytes. The profile's
HBM bandwidth comes from contiguous 16-byte loads. This streams 1 or 16 MiB per SM (all SMs, one block each,
after validate's write flush or straight after another launch) through a ring of two-box steps, as our v3's
producer does, for 1 to 132 interleaved heads, and reports the chip's bandwidth from the global timer.

    python3 -m flashsim.experiments.tma_heads [--out FILE]
writes FILE (default experiments/results/h200/tma-heads.json) and prints each point's median bandwidth.
"""

from __future__ import annotations

import ctypes
import statistics
import sys

REPS = 5
# (rows of 256 bytes a block, heads, box rows, stages): 1 MiB a block (the L2's dirty lines a third of the
# traffic after the flush) and 16 MiB (the stream's own rate); boxes of 16 KiB x 2 in 4 stages, v3's d128 K/V
# ring (176 rows, 2 stages), and small boxes
POINTS = [(rows, heads, box, stages) for rows in (4096, 65536) for box, stages in ((128, 4), (176, 2), (64, 4))
          for heads in ((1, 2, 8, 32, 132) if rows == 4096 and box == 128 else (1, 132))]
PROTOCOLS = ("write flush", "relaunch")


def measure(cp, driver, fn, flush, blocks: int, per_block: int, heads: int, box_rows: int, stages: int,
            protocol: str) -> dict:
    from .calibrate_bench import BLOCK_TIME, block_times

    rows_total = -(-blocks // heads) * per_block
    data = cp.zeros(rows_total * heads * 128, dtype=cp.uint16)
    tmap = driver.TensorMap(data.data.ptr, 2, True, [128, heads, rows_total], [256, 256 * heads], [64, 1, box_rows])
    times = cp.zeros(blocks * BLOCK_TIME.itemsize, dtype=cp.uint8)
    rows = per_block - per_block % box_rows
    smem = 1024 + 2 * stages * box_rows * 128 + 8 * stages
    def launch():
        fn.launch((blocks, 1, 1), 32, smem, 0, tmap.address, ctypes.c_int(heads), ctypes.c_int(rows),
                  ctypes.c_int(box_rows), ctypes.c_int(stages), ctypes.c_void_p(times.data.ptr))

    rates = []
    for _ in range(REPS):
        if protocol == "write flush":
            flush()
        else:
            launch()
        launch()
        cp.cuda.Device().synchronize()
        t = block_times(times)
        span_ns = float(t["ns1"].max() - t["ns0"].min())
        rates.append(blocks * rows * 256 / (span_ns * 1e-9))
    del data
    return {"blocks": blocks, "start": protocol, "heads": heads, "box_rows": box_rows, "stages": stages,
            "bytes_per_block": rows * 256, "bytes_per_s": statistics.median(rates), "calls": rates}


def run(cp, gpu, fn, flush) -> list[dict]:
    from flashsim.kernels import driver

    rows = []
    for protocol in PROTOCOLS:
        for per_block, heads, box_rows, stages in POINTS:
            row = measure(cp, driver, fn, flush, gpu.sm_count, per_block, heads, box_rows, stages, protocol)
            rows.append(row)
            print(f"{protocol:11} {row['bytes_per_block'] >> 20:3} MiB a block, {heads:4} heads, boxes of "
                  f"{box_rows:3} rows, {stages} stages: {row['bytes_per_s'] / 1e12:5.2f} TB/s", flush=True)
    return rows


def main(argv=None) -> int:
    from .calibrate_gpu import tensor_map_main

    return tensor_map_main(argv, "tma_heads", __doc__, run)


if __name__ == "__main__":
    sys.exit(main())
