"""The calibration microbenchmarks, run through cupy on the cubins of kernels/microbench/.

Each function runs one benchmark and returns a dict of raw numbers plus a `how` line that says what was run;
calibrate.py turns them into profile parameters. Per-clock rates come from the SM cycle counter (clock64) of
the blocks themselves, so they need no assumed frequency; per-second rates come from CUDA events.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from .calibrate_ldsm import ldsm_form, xblock_fill
from .calibrate_power import power_hbm, power_mix
from .calibrate_softmax import softmax_gemm, softmax_mix
from .calibrate_wgmma import wgmma_fill, wgmma_shape
from .calibrate_xwarp import xwarp

# Mirrors BlockTime in kernels/microbench/common.cuh.
BLOCK_TIME = np.dtype(
    [("clk0", "<i8"), ("clk1", "<i8"), ("ns0", "<u8"), ("ns1", "<u8"), ("smid", "<u4"), ("pad", "<u4")]
)
MiB = 1 << 20
GiB = 1 << 30


@dataclass
class Bench:
    """What every benchmark needs: cupy, the loaded modules, the device, and the repeat count."""

    cp: object
    modules: dict
    gpu: object
    reps: int = 20
    quick: bool = False

    def fn(self, module: str, name: str):
        return self.modules[module].get_function(name)

    def times(self, blocks: int):
        return self.cp.zeros(blocks * BLOCK_TIME.itemsize, dtype=self.cp.uint8)

    def elapsed(self, launch: Callable[[], None], reps: int | None = None, warmup: int = 2) -> float:
        """Median seconds of `launch` over reps, timed with CUDA events after warm-up launches."""
        cp = self.cp
        for _ in range(warmup):
            launch()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        samples = []
        for _ in range(reps or self.reps):
            start.record()
            launch()
            end.record()
            end.synchronize()
            samples.append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
        return statistics.median(samples)


def block_times(buf) -> np.ndarray:
    return buf.get().view(BLOCK_TIME)


def per_sm_rate(t: np.ndarray, work_per_block: float) -> float:
    """Work per SM cycle: on each SM, the work of its blocks over the span from first start to last end
    (clock64 is one counter per SM); the median over SMs."""
    rates = []
    for sm in np.unique(t["smid"]):
        sel = t[t["smid"] == sm]
        span = int(sel["clk1"].max() - sel["clk0"].min())
        if span > 0:
            rates.append(work_per_block * len(sel) / span)
    return float(np.median(rates))


def clock_hz(t: np.ndarray) -> float:
    """The SM clock the blocks ran at: their cycles over their global-timer nanoseconds (median)."""
    ns = (t["ns1"] - t["ns0"]).astype(np.float64)
    clk = (t["clk1"] - t["clk0"]).astype(np.float64)
    ok = ns > 1000  # the global timer is coarse: skip blocks shorter than a microsecond
    return float(np.median(clk[ok] / ns[ok]) * 1e9) if ok.any() else float("nan")


def _i32(x: int):
    return np.int32(x)


def _u64(x: int):
    return np.uint64(x)


# -- memory ----------------------------------------------------------------------------------------------


def hbm(b: Bench) -> dict:
    """Streaming read, write and copy of buffers far larger than L2 (16-byte .cg accesses, one full wave:
    4 blocks x 512 threads per SM); plus torch's device-to-device copy as a cross-check."""
    cp = b.cp
    size = (512 * MiB) if b.quick else (2 * GiB)
    n16 = size // 16
    src = cp.random.randint(0, 2**30, size // 4, dtype=cp.int32)
    dst = cp.empty_like(src)
    sink = cp.zeros(1, dtype=cp.uint32)
    blocks, threads = 4 * b.gpu.sm_count, 512
    tb = b.times(blocks)
    read = b.fn("membw", "read_cg")
    write = b.fn("membw", "write_cg")
    copy = b.fn("membw", "copy_cg")
    t_read = b.elapsed(lambda: read((blocks,), (threads,), (src, _u64(n16), _i32(1), sink, tb)))
    read_clock = clock_hz(block_times(tb))
    t_write = b.elapsed(lambda: write((blocks,), (threads,), (dst, _u64(n16), _i32(1), tb)))
    half = n16 // 2  # copy half the buffer into the other half's worth of dst: size bytes moved in total
    t_copy = b.elapsed(lambda: copy((blocks,), (threads,), (src, dst, _u64(half), tb)))
    out = {
        "bytes": size,
        "read_bytes_per_s": size / t_read,
        "write_bytes_per_s": size / t_write,
        "copy_bytes_per_s": size / t_copy,  # read + written
        "clock_hz_during_read": read_clock,
        "how": f"read_cg/write_cg/copy_cg over {size // MiB} MiB, {blocks} blocks x {threads} threads, "
        f"16-byte .cg accesses, median of {b.reps} (CUDA events)",
    }
    try:
        import torch

        a = torch.empty(size // 2, dtype=torch.uint8, device="cuda").random_(0, 255)
        c = torch.empty_like(a)
        for _ in range(3):
            c.copy_(a)
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(b.reps):
            ev0.record()
            c.copy_(a)
            ev1.record()
            ev1.synchronize()
            samples.append(ev0.elapsed_time(ev1) * 1e-3)
        out["torch_copy_bytes_per_s"] = size / statistics.median(samples)
    except ImportError:
        out["torch_copy_bytes_per_s"] = None
    return out


def l2_sweep(b: Bench) -> dict:
    """Read bandwidth against footprint: each footprint is re-read (read_wrap: 8 loads in flight per thread
    whatever the footprint, .cg so L2 not L1) for ~2 GiB per launch. Small footprints give the L2 rate, large
    ones HBM; where it falls is L2's effective size for data that all SMs share."""
    cp = b.cp
    l2_mib = b.gpu.l2_bytes // MiB
    points = [2, 4, 8, 16, 24, 32, 40, 44, 48, 52, 56, 60, 64, 72, 80, 96, 128, 256, 512]
    if b.quick:
        points = [4, 16, 48, 128, 512]
    blocks, threads = 4 * b.gpu.sm_count, 512
    total = blocks * threads
    steps = max(1, (2 * GiB) // (16 * 8 * total))
    buf = cp.random.randint(0, 2**30, max(points) * MiB // 4, dtype=cp.int32)
    sink = cp.zeros(1, dtype=cp.uint32)
    tb = b.times(blocks)
    read = b.fn("membw", "read_wrap")
    reps = max(5, b.reps // 4)
    rows = []
    for mib in points:
        n16 = mib * MiB // 16
        args = (buf, np.uint32(n16), np.uint32((8 * total) % n16), _i32(steps), sink, tb)
        t = b.elapsed(lambda args=args: read((blocks,), (threads,), args), reps=reps)
        hz = clock_hz(block_times(tb))
        bw = 16 * 8 * total * steps / t
        rows.append({"footprint_bytes": mib * MiB, "bytes_per_s": bw, "clock_hz": hz, "bytes_per_clk": bw / hz})
    hi = min(32, l2_mib // 2)
    plateau = [r for r in rows if 8 * MiB <= r["footprint_bytes"] <= hi * MiB]
    eff = effective_capacity(rows, statistics.median(r["bytes_per_s"] for r in plateau), rows[-1]["bytes_per_s"])
    return {
        "points": rows,
        "l2_bytes_per_s": statistics.median(r["bytes_per_s"] for r in plateau),
        "l2_bytes_per_clk": statistics.median(r["bytes_per_clk"] for r in plateau),
        "effective_l2_bytes": None if eff is None else min(eff, b.gpu.l2_bytes),
        "how": f"read_wrap re-reading footprints {points[0]}..{points[-1]} MiB, {blocks} blocks x {threads} threads "
        f"x 8 loads in flight, .cg, ~2 GiB per launch, median of {reps}; L2 rate = median over 8..{hi} MiB",
    }


def effective_capacity(rows: list[dict], l2_bw: float, hbm_bw: float) -> int | None:
    """The footprint at which bandwidth falls half-way from the L2 plateau to HBM (linear interpolation
    between the sweep points that straddle it); None if it never falls that far."""
    half = (l2_bw + hbm_bw) / 2
    for lo, hi in zip(rows, rows[1:], strict=False):
        if lo["bytes_per_s"] >= half > hi["bytes_per_s"]:
            f = (lo["bytes_per_s"] - half) / (lo["bytes_per_s"] - hi["bytes_per_s"])
            return int(lo["footprint_bytes"] + f * (hi["footprint_bytes"] - lo["footprint_bytes"]))
    return None


def latency(b: Bench) -> dict:
    """Pointer chase over a random cycle of 128-byte lines, one thread, .cg loads. Footprints that fit L2 are
    walked once first (then every step hits L2); larger ones are not, and the timed steps each touch a line
    no step touched before (every step misses L2)."""
    cp = b.cp
    chase = b.fn("membw", "chase")
    end = cp.zeros(1, dtype=cp.uint32)
    cyc = cp.zeros(1, dtype=cp.int64)
    steps = 2048 if b.quick else 4096
    points = [1, 4, 16, 32, 48, 256, 1024] if not b.quick else [4, 256]
    rows = []
    for mib in points:
        lines = mib * MiB // 128
        perm = cp.random.permutation(lines).astype(cp.uint32) * 32  # element index of each line's first word
        nxt = cp.zeros(mib * MiB // 4, dtype=cp.uint32)
        nxt[perm] = cp.roll(perm, -1)
        del perm
        warm = mib * MiB <= b.gpu.l2_bytes
        start = 0
        if warm:
            chase((1,), (1,), (nxt, np.uint32(0), _i32(lines), end, cyc))
        samples = []
        for _ in range(5):
            chase((1,), (1,), (nxt, np.uint32(start), _i32(steps), end, cyc))
            cp.cuda.Device().synchronize()
            samples.append(int(cyc.get()[0]) / steps)
            start = int(end.get()[0])  # continue along the cycle: fresh lines for the cold footprints
        rows.append({"footprint_bytes": mib * MiB, "warmed": warm, "cycles": statistics.median(samples)})
        del nxt
    l2 = [r["cycles"] for r in rows if r["warmed"] and 4 * MiB <= r["footprint_bytes"] <= 16 * MiB]
    cold = [r for r in rows if not r["warmed"]]
    return {
        "points": rows,
        "l2_hit_cycles": statistics.median(l2),
        "hbm_cycles": cold[-1]["cycles"],
        "hbm_footprint_bytes": cold[-1]["footprint_bytes"],
        "how": f"chase: one thread, random cycle of 128 B lines, .cg loads, {steps} steps, median of 5; "
        "L2 = warmed footprints of 4..16 MiB, HBM = cold steps over the largest footprint",
    }


def loaded_latency(b: Bench) -> dict:
    """HBM load-to-use latency while the rest of the chip streams reads: one thread's pointer chase over a
    cold 1 GiB cycle runs beside read_cg (blocks of 512 threads, at most two per SM so the chase finds room)
    launched just before it on another stream and sized to outlast it. The read's own rate over its run is
    the HBM traffic the chase waited behind."""
    cp = b.cp
    chase, read = b.fn("membw", "chase"), b.fn("membw", "read_cg")
    mib = 256 if b.quick else 1024
    lines = mib * MiB // 128
    perm = cp.random.permutation(lines).astype(cp.uint32) * 32
    nxt = cp.zeros(mib * MiB // 4, dtype=cp.uint32)
    nxt[perm] = cp.roll(perm, -1)
    del perm
    size = (512 * MiB) if b.quick else (2 * GiB)
    src = cp.random.randint(0, 2**30, size // 4, dtype=cp.int32)
    n16 = size // 16
    sink, end = cp.zeros(1, dtype=cp.uint32), cp.zeros(1, dtype=cp.uint32)
    cyc = cp.zeros(1, dtype=cp.int64)
    steps, threads = 1024, 512
    sms = b.gpu.sm_count
    counts = [0, sms // 16, sms // 8, sms // 4, sms // 2, sms, 3 * sms // 2, 2 * sms]
    s_read, s_chase = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    rows, start = [], 0
    for blocks in counts:
        tb = b.times(max(1, blocks))
        reps = 1
        if blocks:  # the solo rate sizes the read to last ~4 ms, several times the chase
            t1 = b.elapsed(partial(read, (blocks,), (threads,), (src, _u64(n16), _i32(1), sink, tb)), reps=3)
            reps = max(1, round(4e-3 / t1))
        samples, rates = [], []
        for _ in range(3 if b.quick else 5):
            ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
            if blocks:
                with s_read:
                    ev0.record(s_read)
                    read((blocks,), (threads,), (src, _u64(n16), _i32(reps), sink, tb))
                    ev1.record(s_read)
            with s_chase:
                chase((1,), (1,), (nxt, np.uint32(start), _i32(steps), end, cyc))
            s_chase.synchronize()
            s_read.synchronize()
            samples.append(int(cyc.get()[0]) / steps)
            start = int(end.get()[0])  # fresh lines next time
            if blocks:
                rates.append(size * reps / (cp.cuda.get_elapsed_time(ev0, ev1) * 1e-3))
        rows.append({"read_blocks": blocks, "read_bytes_per_s": statistics.median(rates) if rates else 0.0,
                     "chase_cycles": statistics.median(samples)})
    return {
        "points": rows,
        "how": f"chase (one thread, {steps} steps over a cold {mib} MiB cycle of 128 B lines, .cg) beside read_cg "
        f"over {size // MiB} MiB ({threads}-thread blocks, 4 loads in flight per thread) on another stream; medians",
    }


def smem(b: Bench) -> dict:
    """Shared-memory read bandwidth (conflict-free 16-byte loads, 2 blocks x 1024 threads per SM) and the
    load-to-use latency of a one-thread index chase."""
    cp = b.cp
    iters = 1024 if b.quick else 4096
    blocks, threads = 2 * b.gpu.sm_count, 1024
    tb = b.times(blocks)
    sink = cp.zeros(1, dtype=cp.float32)
    read = b.fn("compute", "smem_read")
    b.elapsed(lambda: read((blocks,), (threads,), (_i32(iters), sink, tb)), reps=3)
    rate = per_sm_rate(block_times(tb), threads * 16 * 8 * iters)
    chase = b.fn("compute", "smem_chase")
    cyc = cp.zeros(1, dtype=cp.int64)
    usink = cp.zeros(1, dtype=cp.uint32)
    samples = []
    for _ in range(5):
        chase((1,), (32,), (_i32(4096), usink, cyc))
        samples.append(int(cyc.get()[0]) / 4096)
    return {
        "bytes_per_clk_per_sm": rate,
        "latency_cycles": statistics.median(samples),
        "how": f"smem_read: {blocks} blocks x {threads} threads, 16-byte conflict-free LDS, {iters} x 8 per thread, "
        "per-SM bytes over clock64 span; smem_chase: one thread, 4096 dependent LDS, median of 5",
    }


# -- arithmetic ------------------------------------------------------------------------------------------


def fp32_and_mufu(b: Bench) -> dict:
    """FFMA and MUFU.EX2 throughput: 2 blocks x 1024 threads per SM, 8 independent chains per thread."""
    cp = b.cp
    blocks, threads = 2 * b.gpu.sm_count, 1024
    tb = b.times(blocks)
    sink = cp.zeros(1, dtype=cp.float32)
    iters = 1024 if b.quick else 4096
    fma = b.fn("compute", "fp32_fma")
    b.elapsed(lambda: fma((blocks,), (threads,), (np.float32(0.9999), np.float32(1e-4), _i32(iters), sink, tb)), reps=3)
    fma_rate = per_sm_rate(block_times(tb), threads * 8 * iters * 2)
    ex2 = b.fn("compute", "mufu_ex2")
    b.elapsed(lambda: ex2((blocks,), (threads,), (_i32(iters // 4), sink, tb)), reps=3)
    ex2_rate = per_sm_rate(block_times(tb), threads * 8 * (iters // 4))
    # dependent-issue latency: one chain per thread, one block of 4 warps per SM (one per sub-partition)
    dep = b.fn("compute", "fp32_dep")
    dep_tb = b.times(b.gpu.sm_count)
    dep_iters = 4 * iters
    b.elapsed(lambda: dep((b.gpu.sm_count,), (128,), (np.float32(0.9999), np.float32(1e-4), _i32(dep_iters), sink,
                                                      dep_tb)), reps=3)
    t = block_times(dep_tb)
    dep_cycles = float(np.median(t["clk1"] - t["clk0"])) / dep_iters
    return {
        "fp32_flops_per_clk_per_sm": fma_rate,
        "mufu_ex2_per_clk_per_sm": ex2_rate,
        "fp32_dependent_issue_cycles": dep_cycles,
        "how": f"fp32_fma / mufu_ex2: {blocks} blocks x {threads} threads, 8 chains per thread, per-SM work over "
        "clock64 span; fp32_dep: one dependent FFMA chain per thread, 4 warps per SM",
    }


def dep_warps(b: Bench) -> dict:
    """Dependent chains as more warps share each warp scheduler: one dependent FFMA, MUFU.EX2 or SHFL.BFLY
    chain per thread, one block per SM of 4, 8, 12 or 16 warps (1-4 per sub-partition); clock64 cycles per
    instruction of each warp (median over blocks). With one warp per scheduler these are the latencies; the
    growth with more warps is what they lose to each other at issue (not selected, dispatch)."""
    cp = b.cp
    sink = cp.zeros(1, dtype=cp.float32)
    iters = 4096 if b.quick else 16384
    blocks = b.gpu.sm_count
    rows = []
    for name in ("fp32_dep", "mufu_dep", "shfl_dep"):
        fn = b.fn("compute", name)
        head = (np.float32(0.999), np.float32(1e-4)) if name == "fp32_dep" else ()
        for warps in (4, 8, 12, 16):
            tb = b.times(blocks)
            args = (*head, _i32(iters), sink, tb)
            b.elapsed(lambda fn=fn, w=warps, args=args: fn((blocks,), (32 * w,), args), reps=3)
            t = block_times(tb)
            cpi = float(np.median(t["clk1"] - t["clk0"])) / iters
            rows.append({"kernel": name, "warps_per_sm": warps, "cycles_per_instruction": cpi})
    return {
        "points": rows,
        "how": (f"fp32_dep / mufu_dep / shfl_dep: one dependent chain of {iters} per thread, one block per SM of "
                "4/8/12/16 warps, clock64 cycles per instruction of a warp (median over SMs)"),
    }


def dep_latency(b: Bench) -> dict:
    """Dependent-instruction latencies of MUFU.EX2 and SHFL.BFLY: one chain per thread, one block of 4 warps
    per SM (one warp per sub-partition), cycles per instruction by clock64 (median over blocks)."""
    cp = b.cp
    sink = cp.zeros(1, dtype=cp.float32)
    iters = 4096 if b.quick else 16384
    out = {}
    for key, name in (("mufu_latency_cycles", "mufu_dep"), ("shfl_latency_cycles", "shfl_dep")):
        fn = b.fn("compute", name)
        tb = b.times(b.gpu.sm_count)
        b.elapsed(lambda fn=fn, tb=tb: fn((b.gpu.sm_count,), (128,), (_i32(iters), sink, tb)), reps=3)
        t = block_times(tb)
        out[key] = float(np.median(t["clk1"] - t["clk0"])) / iters
    out["how"] = (f"mufu_dep / shfl_dep: one dependent ex2.approx / shfl.sync.bfly chain of {iters} per thread, "
                  "one block of 4 warps per SM, clock64 cycles per instruction (median over SMs)")
    return out


def _random_16bit(n: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """n random normal values as raw 16-bit words of bf16 or fp16 (never NaN or Inf)."""
    x = rng.standard_normal(n).astype(np.float32)
    if kind == "fp16":
        return x.astype(np.float16).view(np.uint16)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def _operand_words(nbytes: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """nbytes of random operands in dtype (bf16, fp16, fp8 e4m3, tf32 as fp32) as uint32 words."""
    if dtype in ("bf16", "fp16"):
        return _random_16bit(nbytes // 2, dtype, rng).view(np.uint32)
    if dtype == "tf32":
        return rng.standard_normal(nbytes // 4).astype(np.float32).view(np.uint32)
    raw = rng.integers(0, 256, nbytes, dtype=np.uint8)
    raw[(raw & 0x7F) == 0x7F] = 0x38  # e4m3 has one NaN code per sign; replace it with 1.0
    return raw.view(np.uint32)


def mma_sync(b: Bench) -> dict:
    """mma.sync throughput (2 blocks x 16 warps per SM, 8 independent accumulators per warp) and the latency of
    one dependent chain (one warp), for bf16 and fp16 (m16n8k16) and tf32 (m16n8k8)."""
    cp = b.cp
    rng = np.random.default_rng(0)
    blocks, threads = 2 * b.gpu.sm_count, 512
    tb = b.times(blocks)
    sink = cp.zeros(1, dtype=cp.float32)
    iters = 256 if b.quick else 1024
    out: dict = {}
    for dtype, flops in (("bf16", 4096), ("fp16", 4096), ("tf32", 2048)):
        init = cp.asarray(_operand_words(32 * 6 * 4, dtype, rng))
        fn = b.fn("compute", f"mma_{dtype}")
        b.elapsed(lambda fn=fn, init=init: fn((blocks,), (threads,), (init, _i32(iters), _i32(8), sink, tb)), reps=3)
        out[f"{dtype}_flops_per_clk_per_sm"] = per_sm_rate(block_times(tb), (threads // 32) * 8 * iters * flops)
        lat_tb = b.times(1)
        fn((1,), (32,), (init, _i32(4096), _i32(1), sink, lat_tb))
        t = block_times(lat_tb)
        out[f"{dtype}_latency_cycles"] = float(t["clk1"][0] - t["clk0"][0]) / 4096
    out["how"] = (
        f"mma_<dtype>: {blocks} blocks x {threads} threads, 8 accumulators per warp, random operands, "
        "per-SM FLOP over clock64 span; latency: one warp, 4096 dependent mma.sync"
    )
    return out


def mma_warps(b: Bench) -> dict:
    """mma.sync throughput per SM with 1, 2 and 4 warps on each of the 4 sub-partitions (one block per SM),
    with 8 independent accumulators per warp or one dependent chain: how much of a sub-partition's tensor
    rate one warp can keep busy. Also the SM clock during a long mma.sync run (the clock depends on the load)."""
    cp = b.cp
    rng = np.random.default_rng(3)
    blocks = b.gpu.sm_count
    tb = b.times(blocks)
    sink = cp.zeros(1, dtype=cp.float32)
    iters = 256 if b.quick else 2048
    init = cp.asarray(_operand_words(32 * 6 * 4, "bf16", rng))
    fn = b.fn("compute", "mma_bf16")
    out: dict = {}
    for warps in (4, 8, 16):
        for chains in (8, 1):
            b.elapsed(lambda w=warps, c=chains: fn((blocks,), (32 * w,), (init, _i32(iters), _i32(c), sink, tb)),
                      reps=3)
            rate = per_sm_rate(block_times(tb), warps * (8 if chains == 8 else 1) * iters * 4096)
            out[f"bf16_{warps}warps_{chains}chains_flops_per_clk_per_sm"] = rate
    long_iters = 1 << (15 if b.quick else 19)
    seconds = b.elapsed(lambda: fn((2 * blocks,), (512,), (init, _i32(long_iters), _i32(8), sink, tb)), reps=3,
                        warmup=1)
    out["clock_hz_mma_sync_load"] = clock_hz(block_times(tb))
    out["clock_kernel_s"] = seconds
    out["how"] = ("mma_bf16 m16n8k16, one block per SM of 4/8/16 warps (1/2/4 per sub-partition), 8 chains or one "
                  "dependent accumulator; clock: 2 blocks x 16 warps per SM "
                  "for ~0.2 s, clock64 over %globaltimer")
    return out


def ldsm_mma(b: Bench) -> dict:
    """ldmatrix-fed mma.sync, as FA2-class kernels' warp-tiled GEMMs run it: 8 warps, one block per SM (the
    backward kernels' occupancy), each warp loading its A and B fragments with ldmatrix.x4 (2 KiB per 16-wide
    k step) and issuing 8 bf16 m16n8k16 on them (also with ldmatrix.trans); and the same loop with only the
    products or only the loads.
    Whether the tensor cores and the shared-memory reads overlap (time = the larger of the two alone) or
    queue behind each other (their sum) is what a GEMM whose operands come from shared memory costs.
    Kept as a reference point: each of its loads computes its address (an add and a mask before the
    ldmatrix), which our kernels' loads do not, and that makes its k-step ~14% slower than the same loads and
    products in ldsm_form's tile_bwd_nn_32x32; the profile's parameter comes from ldsm_form."""
    cp = b.cp
    blocks, warps = b.gpu.sm_count, 8
    tb = b.times(blocks)
    sink = cp.zeros(1, dtype=cp.float32)
    iters = 256 if b.quick else 2048
    steps = warps * iters * 8  # warp k-steps per block
    out: dict = {}
    for name, key in (("ldsm_mma", "both"), ("ldsm_mma_trans", "both_trans"), ("ldsm_mma_mma_only", "mma_only"),
                      ("ldsm_mma_loads_only", "loads_only")):
        fn = b.fn("compute", name)
        b.elapsed(lambda fn=fn: fn((blocks,), (32 * warps,), (_i32(iters), sink, tb)), reps=3)
        t = block_times(tb)
        cycles = float(np.median(t["clk1"] - t["clk0"]))
        out[f"{key}_cycles_per_warp_kstep"] = cycles / (steps / warps)
        out[f"{key}_flops_per_clk_per_sm"] = 0.0 if key == "loads_only" else steps * 8 * 4096 / cycles
        out[f"{key}_smem_bytes_per_clk_per_sm"] = 0.0 if key == "mma_only" else steps * 4 * 512 / cycles
    alone = (out["mma_only_cycles_per_warp_kstep"], out["loads_only_cycles_per_warp_kstep"])
    both = out["both_cycles_per_warp_kstep"]
    # 0: both at once take as long as the slower alone (perfect overlap); 1: as long as the two in turn
    out["overlap_shortfall"] = (both - max(alone)) / min(alone) if min(alone) > 0 else None
    out["how"] = (f"ldsm_mma*: {blocks} blocks x {warps} warps (one per SM), {iters} x 8 k-steps per warp of 4 "
                  "ldmatrix.x4 (conflict-free, 32 KiB buffer) and 8 mma.sync m16n8k16 bf16 into 32 x 32 fp32; "
                  "median block cycles (clock64)")
    return out


def red_dq(b: Bench) -> dict:
    """fp32 reductions into global memory in FA2's backward's dQ pattern (red.global.add.v2.f32 over 8 rows x
    32 bytes per warp instruction, 8 warps, one block per SM): every block into the same 32 KiB tile (the key
    blocks of a head add into one Q block's rows at once) or each into its own. The L2's reduction rate (bytes
    added per second, over CUDA events, so the reductions have been performed) and how many SM cycles a
    warp's instruction takes to issue (block clocks)."""
    cp = b.cp
    blocks, warps = b.gpu.sm_count, 8
    iters = 128 if b.quick else 1024
    accum = cp.zeros(blocks * 64 * 128, dtype=cp.float32)
    fn = b.fn("membw", "red_dq")
    tb = b.times(blocks)
    payload = blocks * warps * iters * 16 * 32 * 8  # bytes added
    out: dict = {}
    for key, tiles in (("same_tile", 1), ("own_tile", blocks)):
        seconds = b.elapsed(lambda t=tiles: fn((blocks,), (32 * warps,), (accum, _i32(t), _i32(iters), tb)), reps=5)
        t = block_times(tb)
        out[f"{key}_bytes_per_s"] = payload / seconds
        out[f"{key}_issue_cycles_per_warp_instruction"] = float(np.median(t["clk1"] - t["clk0"])) / (iters * 16)
    out["how"] = (f"red_dq: {blocks} blocks x {warps} warps, {iters} x 16 float2 reductions per thread into a 64 x 128 "
                  "fp32 tile (the same for all blocks, or one each); bytes added over CUDA-event time; block clocks "
                  "per warp instruction")
    return out


def _burst_cycles(b: Bench, burst, dst, blocks: int, warps: int, count: int) -> float:
    """store_frag_burst on `blocks` SMs x `warps` warps of `count` stores per thread: the median over warps of
    each warp's clock64 span, the median over 5 launches."""
    cp = b.cp
    cyc = cp.zeros(blocks * warps, dtype=cp.int64)
    samples = []
    for _ in range(5):
        burst((blocks,), (32 * warps,), (dst, _i32(count), cyc))
        cp.cuda.runtime.deviceSynchronize()
        samples.append(float(np.median(cyc.get())))
    return float(np.median(samples))


def frag_store(b: Bench) -> dict:
    """Stores of O from accumulator fragments (kernels/microbench/membw.cu store_frag: 16 bytes into each of 8
    rows per warp instruction, as our v3 epilogue writes O) against the same bytes as coalesced 16-byte words,
    one block per SM with 4, 8 or 16 warps, 16 x 128 bf16 tiles, into a 16 MiB buffer (L2) or a 1 GiB one
    (HBM). Per SM: bytes per cycle over the block's clocks (the stores issued; the warp goes on once its
    registers are read); chip: bytes per second over CUDA events (the stores performed)."""
    cp = b.cp
    fn = b.fn("membw", "store_frag")
    d, blocks = 128, b.gpu.sm_count
    tiles = 64 if b.quick else 512
    row_bytes = d * 2
    out: dict = {"points": []}
    for where, size in (("l2", 16 * MiB), ("hbm", GiB)):
        dst = cp.zeros(size // 4, dtype=cp.uint32)
        n_rows = size // row_bytes
        for warps in (4, 8, 16):
            tb = b.times(blocks)
            payload = 16 * row_bytes * tiles * warps  # bytes one block stores
            for form, coalesced in (("fragments", 0), ("coalesced", 1)):
                args = (dst, _i32(d), _u64(n_rows), _i32(tiles), _i32(coalesced), tb)
                seconds = b.elapsed(lambda a=args, w=warps: fn((blocks,), (32 * w,), a), reps=5)
                t = block_times(tb)
                out["points"].append({"where": where, "warps": warps, "form": form,
                                      "bytes_per_clk_per_sm": per_sm_rate(t, payload),
                                      "chip_bytes_per_s": payload * blocks / seconds})  # fmt: skip
        del dst
    pts = {(p["where"], p["warps"], p["form"]): p for p in out["points"]}
    # the kernel's case: its 8 consumer warps storing a fresh output (1 GiB: written lines go on to HBM)
    out["fragments_bytes_per_clk_per_sm"] = pts["hbm", 8, "fragments"]["bytes_per_clk_per_sm"]
    # a burst per warp, all warps of one block per SM at once: the cycles a warp is held by its own stores
    burst = b.fn("membw", "store_frag_burst")
    out["bursts"] = []
    for warps in (4, 8):
        for count in (4, 8, 16, 32, 64, 128):
            dst = cp.zeros(blocks * warps * 16 * 4 * count, dtype=cp.uint32)
            out["bursts"].append({"warps": warps, "stores_per_thread": count, "bytes_per_warp": 32 * 4 * count,
                                  "median_warp_cycles": _burst_cycles(b, burst, dst, blocks, warps, count)})
            del dst
    out["how"] = (f"store_frag: {blocks} blocks x 4/8/16 warps, {tiles} tiles of 16 x {d} bf16 per warp, from "
                  "fragments (16 B into each of 8 rows per warp instruction) or as coalesced 16-byte words, into "
                  "16 MiB (L2) or 1 GiB (HBM); bytes per SM cycle over block clocks (median over SMs); "
                  "store_frag_burst: each warp's clock64 span over a burst of 4-128 fragment stores per thread, "
                  "4 or 8 warps per SM at once, median over warps and 5 launches")
    return out


def frag_store_sms(b: Bench) -> dict:
    """Whether the fragment stores' rate is the SM's or the chip's: store_frag (fragments and coalesced, 8 warps,
    into 1 GiB) and store_frag_burst (8 warps, 32 stores per thread: one v3 tile's epilogue per warp) on 8 to all
    of the SMs, one block each. A rate per SM that rises as fewer SMs store is a limit shared by the chip."""
    cp = b.cp
    fn, burst = b.fn("membw", "store_frag"), b.fn("membw", "store_frag_burst")
    d, warps, tiles, count = 128, 8, 64 if b.quick else 512, 32
    sms = b.gpu.sm_count
    row_bytes = d * 2
    dst = cp.zeros(GiB // 4, dtype=cp.uint32)
    out: dict = {"points": [], "bursts": []}
    for blocks in sorted({8, 16, 33, 66, 99, sms}):
        tb = b.times(blocks)
        payload = 16 * row_bytes * tiles * warps
        for form, coalesced in (("fragments", 0), ("coalesced", 1)):
            args = (dst, _i32(d), _u64(GiB // row_bytes), _i32(tiles), _i32(coalesced), tb)
            seconds = b.elapsed(lambda a=args, n=blocks: fn((n,), (32 * warps,), a), reps=5)
            out["points"].append({"blocks": blocks, "form": form,
                                  "bytes_per_clk_per_sm": per_sm_rate(block_times(tb), payload),
                                  "chip_bytes_per_s": payload * blocks / seconds})  # fmt: skip
        out["bursts"].append({"blocks": blocks, "warps": warps, "bytes_per_warp": 32 * 4 * count,
                              "median_warp_cycles": _burst_cycles(b, burst, dst, blocks, warps, count)})
    del dst
    out["how"] = (f"store_frag on 8..{sms} blocks (one per SM) x {warps} warps, {tiles} tiles of 16 x {d} bf16 per "
                  "warp into 1 GiB, fragments or coalesced; bytes per SM cycle over block clocks (median over SMs) "
                  f"and chip bytes per second over CUDA events; store_frag_burst: {count} fragment stores per "
                  "thread, each warp's clock64 span, median over warps and 5 launches")
    return out


def cp_async_layout(b: Bench) -> dict:
    """cp.async into our v2 kernel's d96 shared-memory layout (kernels/microbench/membw.cu cp_async_d96): 64 x 96
    bf16 tiles with the kernel's copy mapping, rows padded to 208 bytes (the kernel's) or packed at 192, from an
    L2-resident source, 2 or 4 blocks of 128 threads per SM. Bytes copied per SM cycle (block clocks)."""
    cp = b.cp
    fn = b.fn("membw", "cp_async_d96")
    n16 = (8 * MiB) // 16
    src = cp.random.randint(0, 2**30, n16 * 4, dtype=cp.int32)
    iters = 256 if b.quick else 2048
    out: dict = {"points": []}
    for per_sm in (2, 4):
        blocks = per_sm * b.gpu.sm_count
        tb = b.times(blocks)
        for stride in (208, 192):
            smem = 2 * 64 * stride
            args = (src, _u64(n16), _i32(stride), _i32(iters), tb)
            b.elapsed(lambda a=args, m=smem, n=blocks: fn((n,), (128,), a, shared_mem=m), reps=3)
            t = block_times(tb)
            out["points"].append({"blocks_per_sm": per_sm, "row_stride_bytes": stride,
                                  "bytes_per_clk_per_sm": per_sm_rate(t, 64 * 12 * 16 * iters)})  # fmt: skip
    out["how"] = (f"cp_async_d96: 2 or 4 blocks of 128 threads per SM, {iters} tiles of 64 x 96 bf16 each, two in "
                  "flight, the v2 kernel's copy mapping, rows 208 (padded) or 192 bytes apart, 8 MiB source; bytes "
                  "per SM cycle over block clocks (median over SMs)")
    return out


def wgmma(b: Bench) -> dict:
    """wgmma m64n256 throughput with both operands in shared memory (1 and 2 warpgroups per SM; the better is
    the rate) and its issue-to-completion latency (one warpgroup, wait after each)."""
    cp = b.cp
    rng = np.random.default_rng(1)
    sink = cp.zeros(1, dtype=cp.float32)
    iters = 512 if b.quick else 2048
    out: dict = {}
    for dtype, k in (("bf16", 16), ("fp16", 16), ("fp8", 32), ("tf32", 8)):
        init = cp.asarray(_operand_words(10 * 1024, dtype, rng))
        fn = b.fn("wgmma", f"wgmma_{dtype}")
        flops = 2 * 64 * 256 * k
        best = 0.0
        for per_sm in (1, 2):
            blocks = per_sm * b.gpu.sm_count
            tb = b.times(blocks)
            b.elapsed(
                lambda fn=fn, init=init, blocks=blocks, tb=tb: fn(
                    (blocks,), (128,), (init, _i32(iters), _i32(0), sink, tb)
                ),
                reps=3,
            )
            rate = per_sm_rate(block_times(tb), iters * flops)
            out[f"{dtype}_flops_per_clk_per_sm_{per_sm}wg"] = rate
            best = max(best, rate)
        out[f"{dtype}_flops_per_clk_per_sm"] = best
        tb = b.times(1)
        fn((1,), (128,), (init, _i32(1024), _i32(1), sink, tb))
        t = block_times(tb)
        out[f"{dtype}_latency_cycles"] = float(t["clk1"][0] - t["clk0"][0]) / 1024
    out["how"] = (
        f"wgmma_<dtype>: m64n256 (k16 bf16/fp16, k32 fp8 e4m3, k8 tf32), A and B in SMEM, random operands, "
        f"{iters} instructions per warpgroup, 1 or 2 warpgroups per SM (best), per-SM FLOP over clock64 "
        "span; latency: one warpgroup, commit and wait after each of 1024"
    )
    return out


def clock_under_load(b: Bench) -> dict:
    """The SM clock while the tensor cores are saturated for ~0.2 s (wgmma bf16, 2 warpgroups per SM; mma.sync
    on pre-Hopper GPUs): clock64 cycles over the global timer, and over CUDA-event time."""
    cp = b.cp
    rng = np.random.default_rng(2)
    sink = cp.zeros(1, dtype=cp.float32)
    blocks = 2 * b.gpu.sm_count
    tb = b.times(blocks)
    if b.gpu.hopper:
        init = cp.asarray(_operand_words(10 * 1024, "bf16", rng))
        fn, threads = b.fn("wgmma", "wgmma_bf16"), 128
        iters = 1 << (17 if b.quick else 20)  # ~128 tensor-core cycles each, two warpgroups per SM
        args = (init, _i32(iters), _i32(0), sink, tb)
        what = "wgmma_bf16"
    else:
        init = cp.asarray(_operand_words(32 * 6 * 4, "bf16", rng))
        fn, threads = b.fn("compute", "mma_bf16"), 512
        iters = 1 << (15 if b.quick else 18)
        args = (init, _i32(iters), _i32(8), sink, tb)
        what = "mma_bf16"
    seconds = b.elapsed(lambda: fn((blocks,), (threads,), args), reps=3, warmup=1)
    t = block_times(tb)
    span = float(np.median(t["clk1"] - t["clk0"]))
    return {
        "clock_hz": clock_hz(t),
        "clock_hz_events": span / seconds,
        "kernel_s": seconds,
        "how": f"{what}, {blocks} blocks, {seconds * 1e3:.0f} ms per launch, median of 3: clock64 cycles over "
        "%globaltimer per block (median)",
    }


# -- data movement engines --------------------------------------------------------------------------------


def cp_async(b: Bench) -> dict:
    """cp.async (16 B, .cg): sustained issue rate from an L2-resident source (cycles per warp-wide
    instruction per SM), streaming bandwidth from a large source, and one thread's round-trip latency."""
    cp = b.cp
    blocks, threads = 2 * b.gpu.sm_count, 256
    smem = 2 * 8 * threads * 16
    fn = b.fn("membw", "cp_async_stream")
    fn.max_dynamic_shared_size_bytes = smem
    tb = b.times(blocks)
    small = cp.random.randint(0, 2**30, 8 * MiB // 4, dtype=cp.int32)
    iters = 256 if b.quick else 1024
    b.elapsed(lambda: fn((blocks,), (threads,), (small, _u64(8 * MiB // 16), _i32(iters), tb), shared_mem=smem), reps=3)
    instr_per_block = iters * 8 * (threads // 32)
    cycles_per_instr = 1.0 / per_sm_rate(block_times(tb), instr_per_block)
    big_bytes = (512 * MiB) if b.quick else (2 * GiB)
    big = cp.random.randint(0, 2**30, big_bytes // 4, dtype=cp.int32)
    big_iters = big_bytes // (blocks * threads * 16 * 8)
    t = b.elapsed(lambda: fn((blocks,), (threads,), (big, _u64(big_bytes // 16), _i32(big_iters), tb), shared_mem=smem))
    stream_bw = blocks * threads * 16 * 8 * big_iters / t
    lat = b.fn("membw", "cp_async_latency")
    window = 1 * MiB
    warm = b.fn("membw", "read_cg")
    sink = cp.zeros(1, dtype=cp.uint32)
    warm((b.gpu.sm_count,), (512,), (small, _u64(window // 16), _i32(2), sink, b.times(b.gpu.sm_count)))
    cyc = cp.zeros(1, dtype=cp.int64)
    samples = []
    for _ in range(5):
        lat((1,), (1,), (small, _u64(window // 16), _i32(1024), sink, cyc))
        samples.append(int(cyc.get()[0]) / 1024)
    return {
        "issue_cycles_per_warp_instr": cycles_per_instr,
        "hbm_stream_bytes_per_s": stream_bw,
        "l2_latency_cycles": statistics.median(samples),
        "how": f"cp_async_stream: {blocks} blocks x {threads} threads, 8 x 16 B per thread per step, two groups in "
        f"flight, 8 MiB L2-resident source (issue rate) and {big_bytes // MiB} MiB (bandwidth); cp_async_latency: "
        "one thread, issue+commit+wait, 1 MiB warmed window, median of 5",
    }


def tma(b: Bench) -> dict:
    """Bulk copies (cp.async.bulk through the TMA unit, completing on an mbarrier): one thread's round trip for
    small and tile-sized copies from L2, issue cost of back-to-back copies, and streaming bandwidth."""
    cp = b.cp
    lat = b.fn("tma", "bulk_latency")
    window = 1 * MiB
    src = cp.random.randint(0, 2**30, window // 4, dtype=cp.int32)
    warm = b.fn("membw", "read_cg")
    sink = cp.zeros(1, dtype=cp.uint32)
    warm((b.gpu.sm_count,), (512,), (src, _u64(window // 16), _i32(2), sink, b.times(b.gpu.sm_count)))
    cyc = cp.zeros(2, dtype=cp.int64)
    out: dict = {}
    for nbytes in (256, 16384):
        samples, issue = [], []
        for _ in range(5):
            lat((1,), (32,), (src, _u64(window), np.uint32(nbytes), _i32(512), cyc))
            c = cyc.get()
            samples.append(int(c[0]) / 512)
            issue.append(int(c[1]) / 16)
        out[f"latency_cycles_{nbytes}B"] = statistics.median(samples)
        out[f"issue_cycles_{nbytes // 16}B"] = statistics.median(issue)
    stream = b.fn("tma", "bulk_stream")
    chunk, stages = 16384, 4
    smem = chunk * stages + 8 * stages
    stream.max_dynamic_shared_size_bytes = smem
    blocks = 3 * b.gpu.sm_count  # three 64 KiB rings fit an SM
    tb = b.times(blocks)
    total = (512 * MiB) if b.quick else (2 * GiB)
    big = cp.random.randint(0, 2**30, total // 4, dtype=cp.int32)
    per_block = total // chunk // blocks
    t = b.elapsed(
        lambda: stream(
            (blocks,), (32,), (big, _u64(total), np.uint32(chunk), _i32(stages), _i32(per_block), tb), shared_mem=smem
        )
    )
    out["hbm_stream_bytes_per_s"] = blocks * per_block * chunk / t
    l2_total = 16 * MiB
    t = b.elapsed(
        lambda: stream(
            (blocks,),
            (32,),
            (big, _u64(l2_total), np.uint32(chunk), _i32(stages), _i32(per_block), tb),
            shared_mem=smem,
        )
    )
    bt = block_times(tb)
    out["l2_stream_bytes_per_s"] = blocks * per_block * chunk / t
    out["l2_stream_bytes_per_clk"] = out["l2_stream_bytes_per_s"] / clock_hz(bt)
    out["how"] = (
        "bulk_latency: one thread, expect_tx + cp.async.bulk + mbarrier wait, 512 copies of 256 B / 16 KiB "
        "from a warmed 1 MiB window, median of 5; issue: 16 back-to-back copies onto one barrier; "
        f"bulk_stream: {blocks} blocks, one issuing thread each, {stages} x {chunk // 1024} KiB stages, "
        f"{total // MiB} MiB (HBM) or a 16 MiB window (L2)"
    )
    return out


# -- launch ----------------------------------------------------------------------------------------------


def launch(b: Bench) -> dict:
    """Kernel launch overhead: empty one-block kernels queued behind a spinning kernel (so the host is never
    the bottleneck) run back to back; their start-to-start interval is the device-side cost per launch.
    Thread-block dispatch: one block per SM at a time (by dynamic shared memory); on each SM the gap between
    one block's end and the next one's start, in SM cycles."""
    cp = b.cp
    spin, stamp = b.fn("compute", "spin"), b.fn("compute", "stamp")
    n = 400 if b.quick else 1000
    tb = b.times(n)
    ptr = tb.data.ptr
    spin((1,), (1,), (_u64(0),))
    cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    spin((1,), (1,), (_u64(300_000_000),))  # 0.3 s: far longer than queueing n launches takes
    t0 = time.perf_counter()
    start.record()
    for i in range(n):
        stamp((1,), (32,), (_u64(ptr + i * BLOCK_TIME.itemsize),))
    end.record()
    host_s = time.perf_counter() - t0
    end.synchronize()
    t = block_times(tb)
    # The first half only: should the stream's launch queue fill, later launches would wait for the host.
    starts = np.sort(t["ns0"].astype(np.int64))[: n // 2]
    per_launch_ns = (starts[-1] - starts[0]) / (len(starts) - 1)
    events_s = cp.cuda.get_elapsed_time(start, end) * 1e-3 / n
    cta = b.fn("compute", "cta_stamp")
    smem = b.gpu.smem_per_block_optin_bytes // 2 + 1024  # over half the SM: one resident block per SM
    cta.max_dynamic_shared_size_bytes = smem
    blocks = 32 * b.gpu.sm_count
    ctb = b.times(blocks)
    for _ in range(3):
        cta((blocks,), (128,), (ctb,), shared_mem=smem)
    cp.cuda.Device().synchronize()
    ct = block_times(ctb)
    gaps = []
    for sm in np.unique(ct["smid"]):
        sel = np.sort(ct[ct["smid"] == sm], order="clk0")
        gaps.extend((sel["clk0"][1:] - sel["clk1"][:-1]).tolist())
    pair = _dispatch_pair(b, cta)
    return {
        **pair,
        "launch_overhead_s": per_launch_ns * 1e-9,
        "launch_overhead_events_s": events_s,
        "host_enqueue_s": host_s / n,
        "cta_launch_cycles": float(np.median(gaps)),
        "how": f"stamp: {n} empty 1-block kernels queued behind a 0.3 s spin, start-to-start by %globaltimer "
        f"(mean over the first {n // 2}); cta_stamp: {blocks} blocks of 128 threads, {smem // 1024} KiB dynamic "
        "SMEM (one block per SM), median end-to-next-start gap per SM in clock64 cycles",
    }


def _dispatch_pair(b: Bench, cta) -> dict:
    """Whether an SM starts the blocks of one wave together or one after another: cta_stamp blocks sized to
    two per SM (by their dynamic shared memory), one wave of them (2 x SMs), launched after a warm-up; on each
    SM the cycles from its first block's start to its second's (clock64, one counter per SM)."""
    cp = b.cp
    # a third of the SM each (plus the per-block reservation): two fit, three do not
    smem = b.gpu.smem_per_block_optin_bytes // 3 + 1024
    cta.max_dynamic_shared_size_bytes = smem
    blocks = 2 * b.gpu.sm_count
    gaps, pairs = [], 0
    for _ in range(5):
        buf = b.times(blocks)
        cta((blocks,), (128,), (buf,), shared_mem=smem)
        cp.cuda.Device().synchronize()
        t = block_times(buf)
        for sm in np.unique(t["smid"]):
            starts = np.sort(t[t["smid"] == sm]["clk0"])
            if len(starts) >= 2:
                gaps.append(int(starts[1] - starts[0]))
                pairs += len(starts) == 2
    q = np.percentile(gaps, [10, 50, 90]).tolist() if gaps else [float("nan")] * 3
    return {
        "dispatch_pair_gap_cycles": q[1],
        "dispatch_pair_gap_p10_p90": [q[0], q[2]],
        "dispatch_pair_sms": len(gaps),
        "dispatch_pair_sms_with_two": pairs,
        "dispatch_pair_how": f"cta_stamp: one wave of {blocks} blocks of 128 threads, {smem // 1024} KiB dynamic "
        "SMEM (two per SM), 5 launches; per SM, second block's start minus first's in clock64 cycles",
    }


# Benchmarks in run order; the Hopper-only ones are skipped elsewhere.
BENCHMARKS: dict[str, Callable[[Bench], dict]] = {
    "hbm": hbm,
    "l2_sweep": l2_sweep,
    "latency": latency,
    "loaded_latency": loaded_latency,
    "smem": smem,
    "fp32_mufu": fp32_and_mufu,
    "dep_latency": dep_latency,
    "dep_warps": dep_warps,
    "mma_sync": mma_sync,
    "mma_warps": mma_warps,
    "ldsm_mma": ldsm_mma,
    "ldsm_form": ldsm_form,
    "xblock_fill": xblock_fill,
    "red_dq": red_dq,
    "frag_store": frag_store,
    "frag_store_sms": frag_store_sms,
    "cp_async_layout": cp_async_layout,
    "wgmma": wgmma,
    "wgmma_shape": wgmma_shape,
    "wgmma_fill": wgmma_fill,
    "power_mix": power_mix,
    "power_hbm": power_hbm,
    "softmax_mix": softmax_mix,
    "softmax_gemm": softmax_gemm,
    "xwarp": xwarp,
    "clock": clock_under_load,
    "cp_async": cp_async,
    "tma": tma,
    "launch": launch,
}
HOPPER_ONLY = frozenset(
    {"wgmma", "wgmma_shape", "wgmma_fill", "power_mix", "power_hbm", "softmax_mix", "softmax_gemm", "tma"}
)
