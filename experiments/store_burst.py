"""How fast one SM's warps store a block's output tile: the rate our v2's epilogue meets.

The phase stamps of our v2 (experiments/phase_stamps.py) put the stores of O at 0.8-1.5 k cycles a block, about
20 bytes a cycle per SM, where the simulator lets each SM's stores take its share of the chip's L2 port. This
measures that rate apart from attention (kernels/microbench/store_burst.cu): blocks of 4 or 8 warps, each warp
storing 4-16 KiB with coalesced 16-byte stores, on 1, 66 or 132 SMs, to lines the write flush has just evicted
(validate's protocol) and to lines still in the L2 from the call before (warm). Per warp, the SM cycles until its
stores are issued, until they are visible (__threadfence) and until its block is past a barrier after them.

    python3 -m flashsim.experiments.store_burst [--out FILE]
writes FILE (default experiments/results/h200/store-burst.json) and prints each point's medians and the SM's
bytes per cycle (the block's bytes over its slowest warp's cycles to issue).
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

WARPS = (4, 8)
KIB_PER_WARP = (4, 8, 16)
BLOCKS = (1, 66, 132)
REPS = 7


def measure(cp, fn, flush, warps: int, kib: int, blocks: int, warm: bool) -> dict:
    words = kib * 1024 // 16
    dst = cp.empty(blocks * warps * words * 16, dtype=cp.uint8)
    stamps = cp.zeros(blocks * warps * 4, dtype=cp.int64)
    issued, fenced, barrier = [], [], []
    for _ in range(REPS):
        if warm:
            fn((blocks,), (32 * warps,), (dst, np.int32(words), stamps))
        else:
            flush()
        fn((blocks,), (32 * warps,), (dst, np.int32(words), stamps))
        cp.cuda.Device().synchronize()
        s = stamps.get().reshape(blocks, warps, 4)
        issued.append(float(np.median(s[:, :, 0].max(axis=1))))
        fenced.append(float(np.median(s[:, :, 1].max(axis=1))))
        barrier.append(float(np.median(s[:, :, 2].max(axis=1))))
    block_bytes = warps * kib * 1024
    issue = statistics.median(issued)
    return {"warps": warps, "kib_per_warp": kib, "blocks": blocks, "start": "warm" if warm else "write flush",
            "issue_cycles": issue, "fence_cycles": statistics.median(fenced),
            "barrier_cycles": statistics.median(barrier), "bytes_per_clk_per_sm": block_bytes / issue,
            "samples": {"issue": issued, "fence": fenced, "barrier": barrier}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.store_burst", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="experiments/results/h200/store-burst.json")
    args = ap.parse_args(argv)
    from .calibrate_gpu import load_module, read_gpu, require_gpu, write_rows
    from .validate import make_flush

    cp = require_gpu("store_burst")
    gpu = read_gpu(cp)
    fn = load_module(cp, "store_burst", gpu.arch).get_function("store_rows")
    flush = make_flush(cp, gpu)
    rows = []
    for warm in (False, True):
        for warps in WARPS:
            for kib in KIB_PER_WARP:
                for blocks in BLOCKS:
                    row = measure(cp, fn, flush, warps, kib, blocks, warm)
                    rows.append(row)
                    print(f"{row['start']:11} {warps} warps x {kib:2} KiB on {blocks:3} SMs: issue "
                          f"{row['issue_cycles']:7.0f}  fence {row['fence_cycles']:7.0f}  barrier "
                          f"{row['barrier_cycles']:7.0f} cycles  {row['bytes_per_clk_per_sm']:5.1f} B/clk/SM",
                          flush=True)
    write_rows(args.out, cp, gpu, "store_burst", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
