"""HBM streaming-read bandwidth as the decode kernel sees it (development data for the decode model's memory side):
how it depends on the number of SMs reading, the blocks per SM, each block's bytes in flight (cp.async stages x
tile bytes) and an uneven mix of one and two blocks per SM, and what a short kernel costs beyond its bytes.

Kernel: kernels/microbench/hbm_probe.cu (ring_read_s<stages>): each working block reads its own region, a K and a
V half, through a ring of `stages` (K, V) tile pairs, stages - 1 in flight, as the decode kernel copies K/V (its
math left out). The host picks which SMs read and how many blocks each runs (by %smid). Every time is GPU busy
time from the CUDA profiler (validate.gpu_calls) with an L2 flush before each call, median of CALLS calls; the
blocks' own %globaltimer stamps give the span inside the kernel and each block's duration.

    python3 -m flashsim.experiments.hbm_probe [--out DIR] [--max-seconds S]
writes DIR/hbm-probe.jsonl (a row per point, as measured), DIR/hbm-probe.json and DIR/hbm-probe.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
MAX_SMID = 256  # kernels/microbench/hbm_probe.cu, MAX_SMID
THREADS = 128  # the decode kernel's 4 warps
STAGE_COUNTS = (2, 3, 4, 6)  # ring_read_s<N> instantiations
DECODE_STAGES, DECODE_TILE = 3, 16 * KiB  # the d128 decode kernel: 64 keys x 128 x bf16 per K (and V) tile
BUFFER_BYTES = 2 * GiB  # distinct bytes the working blocks share out: never an L2 hit
BLOCK_BYTES = 8 * MiB  # per working block, less when many blocks would overrun the buffer
SMEM_RESERVED = 1 * KiB  # per block, the runtime's share (sm_80 and later)
SMEM_STATIC = 128  # hbm_probe.cu's own __shared__ word, aligned
CALLS = 5


@dataclass
class Point:
    sweep: str
    stages: int
    tile_bytes: int
    k_max: int  # blocks the grid puts on each SM (shared memory allows no more)
    want: dict[int, int]  # smid -> blocks that read on it
    grid: int | None = None  # None: sm_count x k_max; else this many blocks, all reading, placed by the hardware
    block_bytes: int = BLOCK_BYTES
    note: str = ""


def _u32(x: int):
    return np.uint32(x)


def _u64(x: int):
    return np.uint64(x)


class Probe:
    def __init__(self, cp, gpu):
        from .calibrate_bench import BLOCK_TIME
        from .calibrate_gpu import load_module
        from .validate import make_flush

        self.cp, self.gpu, self.block_time = cp, gpu, BLOCK_TIME
        self.module = load_module(cp, "hbm_probe", gpu.arch)
        self.flush = make_flush(cp, gpu)
        self.buf = cp.empty(BUFFER_BYTES, dtype=cp.uint8)
        self.buf.fill(1)
        self.want = cp.zeros(MAX_SMID, dtype=cp.int32)
        self.arrivals = cp.zeros(MAX_SMID + 1, dtype=cp.uint32)
        self.sink = cp.zeros(1, dtype=cp.uint32)
        self.times = cp.zeros(8 * MAX_SMID * BLOCK_TIME.itemsize, dtype=cp.uint8)
        self.smids = self._census()

    def smem_for(self, ring_bytes: int, k_max: int) -> int | None:
        """Dynamic shared memory that holds the ring and lets exactly k_max blocks share an SM; None: cannot."""
        per_sm = self.gpu.smem_per_sm_bytes
        floor = per_sm // (k_max + 1) - SMEM_RESERVED - SMEM_STATIC + 16  # k_max + 1 blocks no longer fit
        smem = -(-max(ring_bytes, floor) // 16) * 16
        if k_max * (smem + SMEM_RESERVED + SMEM_STATIC) > per_sm or smem > self.gpu.smem_per_block_optin_bytes:
            return None
        return smem

    def _launcher(self, stages: int, tile_bytes: int, k_max: int, grid: int | None, block_bytes: int):
        fn = self.module.get_function(f"ring_read_s{stages}")
        smem = self.smem_for(stages * 2 * tile_bytes, k_max)
        if smem is None:
            return None, None, None
        fn.max_dynamic_shared_size_bytes = smem
        with contextlib.suppress(Exception):  # all shared memory, so k_max blocks fit whatever the driver prefers
            fn.preferred_shared_memory_carveout = 100
        grid = grid if grid is not None else self.gpu.sm_count * k_max
        block_words, tile_words = block_bytes // 16, tile_bytes // 16

        def launch():
            self.arrivals.fill(0)
            fn((grid,), (THREADS,), (self.buf, self.want, self.arrivals, _u64(block_words), _u32(tile_words),
                                     self.sink, self.times), shared_mem=smem)  # fmt: skip

        occupancy = None
        with contextlib.suppress(Exception):  # a CuPy without the call: the placement check still runs
            occupancy = int(self.cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, THREADS, smem))
        return launch, smem, occupancy

    def _census(self) -> list[int]:
        """The SM ids blocks run on: one empty block per SM."""
        self.want.fill(0)
        self.want[:] = 1
        launch, _, _ = self._launcher(2, 1 * KiB, 1, None, 0)
        launch()
        self.cp.cuda.Device().synchronize()
        t = self.times.get().view(self.block_time)[: self.gpu.sm_count]
        return sorted(int(s) for s in t["smid"])

    def pick(self, count: int, spread: bool) -> list[int]:
        """count SM ids: the first ones, or evenly spaced over all."""
        n = len(self.smids)
        if not spread or count >= n:
            return self.smids[:count]
        return [self.smids[(i * n) // count] for i in range(count)]

    def measure(self, p: Point) -> dict | None:
        from .validate import gpu_calls

        cp = self.cp
        want = np.zeros(MAX_SMID, dtype=np.int32)
        if p.grid is None:
            for sm, n in p.want.items():
                want[sm] = n
            working = sum(p.want.values())
        else:
            want[:] = p.k_max
            working = p.grid
        step = 2 * p.tile_bytes
        block_bytes = min(p.block_bytes, (BUFFER_BYTES // max(working, 1)) // step * step) // step * step
        launch, smem, occupancy = self._launcher(p.stages, p.tile_bytes, p.k_max, p.grid, block_bytes)
        if launch is None:
            return None
        self.want.set(want)
        launch()  # warm-up
        cp.cuda.Device().synchronize()
        name = f"ring_read_s{p.stages}"
        calls = [
            [e for e in work if e.name.split("(")[0].strip() == name] for work in gpu_calls(launch, self.flush, CALLS)
        ]
        us = [sum(e.time_range.elapsed_us() for e in c) for c in calls if c]
        t = self.times.get().view(self.block_time)[:working]
        per_sm: dict[int, list[int]] = {}
        for i, sm in enumerate(t["smid"].tolist()):
            per_sm.setdefault(int(sm), []).append(i)
        block_us = (t["ns1"].astype(np.int64) - t["ns0"].astype(np.int64)) / 1e3
        span_us = float((t["ns1"].astype(np.int64).max() - t["ns0"].astype(np.int64).min()) / 1e3) if working else 0.0
        by_load: dict[str, list[float]] = {}
        overlapped = True
        for idx in per_sm.values():
            by_load.setdefault(str(len(idx)), []).extend(block_us[idx].tolist())
            if len(idx) > 1:
                overlapped &= bool(t["ns0"][idx].max() < t["ns1"][idx].min())
        placement_ok = (p.grid is not None or {sm: len(i) for sm, i in per_sm.items()} == {
            sm: n for sm, n in p.want.items() if n}) and overlapped  # fmt: skip
        gpu_us = statistics.median(us) if us else float("nan")
        total = working * block_bytes
        loads = sorted((len(i) for i in per_sm.values()), reverse=True)
        return {
            "sweep": p.sweep,
            "note": p.note,
            "stages": p.stages,
            "tile_bytes": p.tile_bytes,
            "inflight_bytes_per_block": (p.stages - 1) * 2 * p.tile_bytes,
            "k_max": p.k_max,
            "grid": p.grid if p.grid is not None else self.gpu.sm_count * p.k_max,
            "active_sms": len(per_sm),
            "blocks": working,
            "sms_by_blocks": {str(n): loads.count(n) for n in sorted(set(loads))},
            "block_bytes": block_bytes,
            "total_bytes": total,
            "gpu_us": gpu_us,
            "gpu_us_calls": us,
            "tb_s": total / gpu_us / 1e6 if gpu_us > 0 else None,
            "span_us": span_us,
            "block_us_by_sm_blocks": {
                k: {"median": statistics.median(v), "min": min(v), "max": max(v)} for k, v in sorted(by_load.items())
            },  # fmt: skip
            "per_sm_gb_s": {k: block_bytes * int(k) / statistics.median(v) / 1e3 for k, v in sorted(by_load.items())},
            "smem_bytes": smem,
            "occupancy": occupancy,
            "placement_ok": placement_ok,
        }


def points(probe: Probe) -> list[Point]:
    sm_count = len(probe.smids)
    pts: list[Point] = []
    s, tile = DECODE_STAGES, DECODE_TILE
    # 1. Active SMs x blocks per SM, the decode kernel's ring (3 stages of 2 x 16 KiB: 64 KiB in flight per block).
    counts = sorted({c for c in (1, 2, 4, 8, 16, 24, 33, 48, 66, 92, 100, 116, 132) if c <= sm_count} | {sm_count})
    for k in (1, 2):
        for c in counts:
            for spread in (False, True) if c < sm_count else (False,):
                want = dict.fromkeys(probe.pick(c, spread), k)
                pts.append(Point("sms", s, tile, k, want, note="spread" if spread else "first"))
    # 2. Bytes in flight per block (stages x tile) x blocks per SM, on one SM and on all.
    for c in (1, sm_count):
        for stages in STAGE_COUNTS:
            for tb in (2 * KiB, 4 * KiB, 8 * KiB, 16 * KiB):
                for k in (1, 2, 3, 4):
                    if probe.smem_for(stages * 2 * tb, k) is not None:
                        pts.append(Point("inflight", stages, tb, k, dict.fromkeys(probe.pick(c, False), k)))
    # 3. Uneven: n2 SMs (spread) with two blocks, the rest with one, every block the same bytes (a split each).
    for n2 in (0, 20, 40, 66, 92, 112, sm_count):
        twos = set(probe.pick(n2, True)) if n2 else set()
        want = {sm: 2 if sm in twos else 1 for sm in probe.smids}
        pts.append(Point("uneven", s, tile, 2, want, note=f"{n2} SMs with 2 blocks"))
    # 4. The hardware's own placement of a grid of G blocks (two fit an SM), as the decode kernel launches.
    for g in (sm_count, sm_count + sm_count // 3, 224, 2 * sm_count):
        pts.append(Point("natural", s, tile, 2, {}, grid=g, note=f"grid {g}"))
    # 5. Fixed costs: duration vs bytes for grids of 1, 2, all SMs and two per SM; bytes 0 = an empty block.
    for g, k in ((1, 1), (2, 1), (sm_count, 1), (2 * sm_count, 2)):
        for bb in (0, 64 * KiB, 256 * KiB, MiB, 4 * MiB):
            pts.append(Point("fixed", s, tile, k, {}, grid=g, block_bytes=bb, note=f"grid {g}"))
    pts.append(Point("fixed", s, tile, 1, {}, note="no block reads"))
    return pts


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="hbm-probe-out")
    ap.add_argument("--max-seconds", type=float, default=170.0, help="stop starting new points after this long")
    args = ap.parse_args(argv)
    import cupy as cp

    from .calibrate_gpu import read_gpu
    from .torch_provenance import torch_gpu_provenance

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    probe = Probe(cp, read_gpu(cp))
    print(f"{len(probe.smids)} SMs, ids {probe.smids[:4]}..{probe.smids[-4:]}", flush=True)
    rows = []
    with open(out / "hbm-probe.jsonl", "w") as jl:
        for p in points(probe):
            if time.monotonic() - t0 > args.max_seconds:
                print(f"stopped at {args.max_seconds} s: {p.sweep} {p.note} and later points not run", flush=True)
                break
            row = probe.measure(p)
            if row is None:
                continue
            rows.append(row)
            jl.write(json.dumps(row) + "\n")
            jl.flush()
            print(json.dumps({k: row[k] for k in ("sweep", "note", "stages", "tile_bytes", "k_max", "blocks",
                                                    "sms_by_blocks", "gpu_us", "span_us", "tb_s", "placement_ok")}),
                  flush=True)  # fmt: skip
    meta = torch_gpu_provenance("python3 -m flashsim.experiments.hbm_probe", smids=probe.smids)
    (out / "hbm-probe.json").write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1) + "\n")
    lines = [
        "| sweep | note | stages x tile KiB | blocks (SMs x n) | MiB/block | GPU us | span us | TB/s | SM GB/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sms = ", ".join(f"{n}x{c}" for n, c in r["sms_by_blocks"].items())
        per_sm = ", ".join(f"{k}:{v:.0f}" for k, v in r["per_sm_gb_s"].items())
        lines.append(f"| {r['sweep']} | {r['note']} | {r['stages']}x{r['tile_bytes'] // KiB} | {r['blocks']} ({sms}) | "
                     f"{r['block_bytes'] / MiB:.2f} | {r['gpu_us']:.1f} | {r['span_us']:.1f} | "
                     f"{(r['tb_s'] or 0):.3f} | {per_sm} |")  # fmt: skip
    (out / "hbm-probe.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'hbm-probe.json'} ({len(rows)} points) in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
