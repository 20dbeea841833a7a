"""The power_mix sweep: the SM clock power management settles at under sustained mixes of tensor-core, MUFU and
FP32 work (kernels/microbench/power_mix.cu), with Nsight-free evidence of why: nvidia-smi's power draw and
clock-event reasons sampled every 20 ms beside it.

Each point runs its mix on every SM for about 0.2 s, twice back to back (the second is kept, so the clock has
settled); its numbers are the median over blocks of clock64 over the global timer, and the work done per SM
cycle of each kind.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import subprocess
import tempfile

import numpy as np

PERIOD = 2048  # cycles per period of the mix
SECONDS = 0.2
WGMMA_FLOPS = 2 * 64 * 256 * 16  # one m64n256k16
MMA_FLOPS = 2 * 16 * 8 * 16  # one m16n8k16
# (tensor kind, tensor instructions per period, MUFU per thread per period, FFMA per thread per period)
POINTS: list[tuple[str, int, int, int]] = [
    *[("wgmma", k, m, f) for k in (0, 4, 8, 12, 16) for m in (0, 128, 256) for f in (0, 1024)],
    *[("mma_sync", k, m, 0) for k in (88, 176, 264, 344) for m in (0, 256)],
]
SMI = [
    "nvidia-smi",
    "--query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active",
    "--format=csv,noheader,nounits",
    "-lms",
    "20",
]


def _smi_rows(text: str) -> list[tuple[dt.datetime, float, float, str]]:
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        try:
            when = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
            rows.append((when, float(parts[1]), float(parts[2]), parts[3]))
        except ValueError:
            continue
    return rows


def _window(rows, start: dt.datetime, end: dt.datetime) -> dict:
    inside = [r for r in rows if start <= r[0] <= end]
    if not inside:
        return {}
    return {
        "smi_samples": len(inside),
        "smi_clock_mhz": float(np.median([r[1] for r in inside])),
        "smi_power_w": float(np.median([r[2] for r in inside])),
        "smi_event_reasons": sorted({r[3] for r in inside}),
    }


def _add_smi(rows: list[dict], windows: list, text: str) -> None:
    """Each row's nvidia-smi samples (clock, power, event reasons) over its kept run's window."""
    samples = _smi_rows(text)
    for row, (start, end) in zip(rows, windows, strict=True):
        row.update(_window(samples, start, end))


def power_mix(b) -> dict:
    from .calibrate_bench import _operand_words, block_times, clock_hz

    cp = b.cp
    rng = np.random.default_rng(5)
    init = cp.asarray(_operand_words(40 * 1024, "bf16", rng))
    sink = cp.zeros(1, dtype=cp.float32)
    fn = b.fn("power_mix", "power_mix")
    blocks = b.gpu.sm_count
    tb = b.times(blocks)
    periods = max(16, int((0.02 if b.quick else SECONDS) * 1.8e9 / PERIOD))
    smi = None  # no nvidia-smi: the clocks stand alone
    with contextlib.suppress(OSError):
        smi = subprocess.Popen(SMI, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rows, windows = [], []
    for kind, k, mufu, ffma in POINTS:
        args = (
            init,
            np.int32(kind == "mma_sync"),
            np.int32(k),
            np.int32(mufu),
            np.int32(ffma),
            np.int32(PERIOD),
            np.int32(periods),
            sink,
            tb,
        )
        fn((blocks,), (256,), args)
        cp.cuda.Device().synchronize()
        start = dt.datetime.now()
        fn((blocks,), (256,), args)
        cp.cuda.Device().synchronize()
        windows.append((start, dt.datetime.now()))
        t = block_times(tb)
        cycles = float(np.median((t["clk1"] - t["clk0"]).astype(np.float64)))
        tensor = k * (WGMMA_FLOPS if kind == "wgmma" else 4 * MMA_FLOPS) * periods  # mma.sync: per warp x 4
        rows.append(
            {
                "tensor": kind,
                "tensor_per_period": k,
                "mufu_per_thread": mufu,
                "ffma_per_thread": ffma,
                "period_cycles": PERIOD,
                "periods": periods,
                "clock_hz": clock_hz(t),
                "cycles": cycles,
                "overrun": cycles / (periods * PERIOD),
                "tensor_flops_per_clk_per_sm": tensor / cycles,
                "mufu_per_clk_per_sm": 128 * mufu * periods / cycles,
                "fp32_flops_per_clk_per_sm": 2 * 128 * ffma * periods / cycles,
            }
        )
    if smi is not None:
        smi.terminate()
        _add_smi(rows, windows, smi.communicate(timeout=5)[0])
    return {
        "points": rows,
        "how": (
            f"power_mix.cu: one block per SM of two warpgroups for {periods} periods of {PERIOD} cycles "
            "(~0.2 s), run twice, the second kept: warpgroup 0 issues k wgmma m64n256k16 (SS, 128-byte "
            "swizzle) or k mma.sync m16n8k16 per warp, warpgroup 1 m MUFU.EX2 and f FFMA per thread in 8 "
            "chains, then both wait out the period; clock: clock64 over %globaltimer, median over blocks; "
            "work per clock64 cycle; nvidia-smi power and clock every 20 ms over the kept run"
        ),
    }


# power_hbm: (tensor kind, tensor instructions per period, 16-byte loads per streaming thread per period). Its
# period is 4x power_mix's, so that 16 loads a thread (64 KiB an SM) take about half the HBM's rate.
HBM_PERIOD = 4 * PERIOD
HBM_LOADS = (0, 16, 32, 48, 64)
HBM_POINTS: list[tuple[str, int, int]] = [
    *[("wgmma", k, n) for k in (0, 16, 32, 48, 64) for n in HBM_LOADS],
    *[("mma_sync", k, n) for k in (704, 1376) for n in HBM_LOADS],
]
# how the warps wait out each period: spinning on the clock, or napping (as warps parked on a barrier)
HBM_WAITS = ("spin", "nap")
HBM_STREAM_WARPGROUPS = 2
HBM_BUFFER_BYTES = 4 << 30


def power_hbm(b) -> dict:
    """The clock under tensor-core work and HBM reads together (kernels/microbench/power_hbm.cu): each point's
    clock, tensor rate and HBM read rate, measured as power_mix's are, with nvidia-smi's power beside it."""
    from .calibrate_bench import _operand_words

    cp = b.cp
    rng = np.random.default_rng(5)
    init = cp.asarray(_operand_words(40 * 1024, "bf16", rng))
    words = HBM_BUFFER_BYTES // 16
    # words that no memory-side compression could shrink (a buffer of zeros streams faster than HBM can)
    buffer = cp.arange(HBM_BUFFER_BYTES // 4, dtype=cp.uint32) * cp.uint32(2654435761)
    sink = cp.zeros(1, dtype=cp.float32)
    fn = b.fn("power_hbm", "power_hbm")
    blocks = b.gpu.sm_count
    threads = 128 * (1 + HBM_STREAM_WARPGROUPS)
    tb = b.times(blocks)
    periods = max(16, int((0.02 if b.quick else SECONDS) * 1.8e9 / HBM_PERIOD))
    with tempfile.TemporaryFile(mode="w+") as log:  # a file, not a pipe: a full pipe would stop nvidia-smi
        rows, windows = _power_hbm_points(b, fn, (init, buffer, words, sink, tb), blocks, threads, periods, log)
        log.seek(0)
        _add_smi(rows, windows, log.read())
    return {
        "points": rows,
        "how": (
            f"power_hbm.cu: one block per SM, {periods} periods of {HBM_PERIOD} cycles (~0.2 s), run twice, the "
            "second kept: warpgroup 0 issues k wgmma m64n256k16 (SS) or k mma.sync m16n8k16 per warp, "
            f"{HBM_STREAM_WARPGROUPS} warpgroups stream n 16-byte ld.global.cg per thread (16 in flight) from a "
            f"{HBM_BUFFER_BYTES >> 30} GiB buffer of incompressible words, then all wait out the period (spinning on "
            "clock64, or napping 128 ns between looks); clock: "
            "clock64 over %globaltimer, median over blocks; HBM rate: bytes read over the launch's span "
            "(first block start to last block end); nvidia-smi power every 20 ms over the kept run"
        ),
    }


def _power_hbm_points(b, fn, buffers, blocks: int, threads: int, periods: int, log) -> tuple[list, list]:
    from .calibrate_bench import block_times, clock_hz

    cp = b.cp
    init, buffer, words, sink, tb = buffers
    smi = None
    with contextlib.suppress(OSError):
        smi = subprocess.Popen(SMI, stdout=log, stderr=subprocess.DEVNULL, text=True)
    rows, windows = [], []
    for wait, (kind, k, loads) in ((w, p) for w in HBM_WAITS for p in HBM_POINTS):
        args = (init, buffer, np.uint64(words), np.int32(kind == "mma_sync"), np.int32(k), np.int32(loads),
                np.int32(HBM_PERIOD), np.int32(periods), np.int32(wait == "nap"), sink, tb)
        fn((blocks,), (threads,), args)
        cp.cuda.Device().synchronize()
        start = dt.datetime.now()
        fn((blocks,), (threads,), args)
        cp.cuda.Device().synchronize()
        windows.append((start, dt.datetime.now()))
        t = block_times(tb)
        cycles = float(np.median((t["clk1"] - t["clk0"]).astype(np.float64)))
        # the HBM rate over the whole launch: where the reads fill the HBM, blocks end apart and one block's
        # time is shorter than the span in which all of them read
        seconds = float(t["ns1"].max() - t["ns0"].min()) * 1e-9
        tensor = k * (WGMMA_FLOPS if kind == "wgmma" else 4 * MMA_FLOPS) * periods
        hbm_bytes = 16.0 * loads * periods * blocks * 128 * HBM_STREAM_WARPGROUPS
        rows.append({
            "wait": wait, "tensor": kind, "tensor_per_period": k, "loads_per_thread": loads,
            "period_cycles": HBM_PERIOD,
            "periods": periods, "clock_hz": clock_hz(t), "cycles": cycles, "seconds": seconds,
            "overrun": cycles / (periods * HBM_PERIOD), "tensor_flops_per_clk_per_sm": tensor / cycles,
            "hbm_read_bytes_per_s": hbm_bytes / seconds if seconds > 0 else 0.0,
        })
    if smi is not None:
        smi.terminate()
        smi.wait(timeout=5)
    return rows, windows


def main(argv: list[str] | None = None) -> int:
    """`python3 -m flashsim.experiments.calibrate_power --out FILE.json`: the power_hbm sweep alone (it loads one
    cubin, where `flashsim calibrate --only power_hbm` loads every microbenchmark's)."""
    import argparse
    import json
    import sys

    from .calibrate_bench import Bench
    from .calibrate_gpu import load_module, provenance, read_gpu, require_gpu

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--bursts", action="store_true", help="the power_bursts sweep instead of power_hbm")
    ap.add_argument("--grid-ms", type=float, help="with --bursts: every power_hbm mix in launches of this many ms, "
                                                   "an L2 fill between them")
    ap.add_argument("--passes", type=int, default=1, help="with --bursts: run every case this many times")
    ap.add_argument("--shuffle", type=int, metavar="SEED", help="with --bursts: each pass in an order shuffled "
                    "from SEED (default: the listed order)")
    args = ap.parse_args(argv)
    if args.passes < 1:
        ap.error(f"--passes must be at least 1, got {args.passes}")
    if (args.passes > 1 or args.shuffle is not None) and not args.bursts:
        ap.error("--passes and --shuffle go with --bursts")
    cp = require_gpu("calibrate_power")
    gpu = read_gpu(cp)
    bench = Bench(cp=cp, modules={"power_hbm": load_module(cp, "power_hbm", gpu.arch)}, gpu=gpu, quick=args.quick)
    name = "power_bursts" if args.bursts else "power_hbm"
    if args.bursts and args.grid_ms:
        result = power_bursts(bench, HBM_POINTS, (args.grid_ms,), ("flush",), bursts=20, passes=args.passes,
                              seed=args.shuffle)
    elif args.bursts:
        result = power_bursts(bench, passes=args.passes, seed=args.shuffle)
    else:
        result = power_hbm(bench)
    argv_used = ["calibrate_power", *(sys.argv[1:] if argv is None else argv)]
    with open(args.out, "w") as f:
        json.dump({"provenance": provenance(cp, gpu, argv_used), "gpu": gpu.__dict__, name: result}, f, indent=1)
    if args.bursts:
        for r in result["points"]:
            print(f"pass {r['pass']} {r['tensor']:<9} k {r['tensor_per_period']:>4} loads {r['loads_per_thread']:>3} "
                  f"{r['burst_ms']:>5} ms {r['between']:<5} {r['clock_hz'] / 1e6:6.0f} MHz (first "
                  f"{r['clock_first_hz'] / 1e6:.0f})  duty {r['duty']:.2f}  "
                  f"{r['tensor_flops_per_clk_per_sm']:6.0f} FLOP/clk/SM  {r['hbm_read_bytes_per_s'] / 1e12:5.2f} TB/s")
        return 0
    for r in result["points"]:
        print(f"{r['wait']:<5} {r['tensor']:<9} k {r['tensor_per_period']:>3} loads {r['loads_per_thread']:>3}  "
              f"{r['clock_hz'] / 1e6:6.0f} MHz  {r['hbm_read_bytes_per_s'] / 1e12:5.2f} TB/s  "
              f"{r['tensor_flops_per_clk_per_sm']:7.0f} FLOP/clk/SM  overrun {r['overrun']:.2f}  "
              f"{r.get('smi_power_w', float('nan')):5.0f} W")
    return 0



# power_bursts: one power_hbm mix in launches of a set length, back to back or with an L2-sized write between
# them (as a measurement that flushes the L2 between calls runs them), for the power limit's averaging window
BURST_MIXES = (("mma_sync", 704, 32), ("wgmma", 48, 32))
BURST_MS = (0.25, 0.5, 1.0, 2.0, 4.0, 16.0)
BURSTS = 40  # launches per case; the clock is the median over the last half


def burst_order(mixes, passes: int = 1, seed: int | None = None) -> list[tuple[int, tuple]]:
    """(pass, mix) in the order a sweep runs them: every mix once per pass, in the given order, or shuffled anew
    in each pass when `seed` is set (so that a point's clock is not always measured after the same neighbour,
    and the passes show how far a point moves between runs)."""
    rng = np.random.default_rng(seed) if seed is not None else None
    order = []
    for n in range(passes):
        ranks = rng.permutation(len(mixes)) if rng is not None else range(len(mixes))
        order += [(n, mixes[i]) for i in ranks]
    return order


def power_bursts(b, mixes=BURST_MIXES, lengths=BURST_MS, betweens=("none", "flush"), bursts=BURSTS,
                 passes: int = 1, seed: int | None = None) -> dict:
    """The clock of launches of 0.25-16 ms of a mix that meets the power limit when held (power_hbm), each case
    run back to back and with a write of twice the L2 between launches. With `mixes` = HBM_POINTS and one length:
    the power_hbm grid as a measurement that flushes the L2 between calls of that length sees it. `passes` runs
    every case that often, in an order shuffled anew each pass from `seed` (burst_order); each row names its
    pass."""
    from .calibrate_bench import _operand_words, block_times, clock_hz

    cp = b.cp
    init = cp.asarray(_operand_words(40 * 1024, "bf16", np.random.default_rng(5)))
    words = HBM_BUFFER_BYTES // 16
    buffer = cp.arange(HBM_BUFFER_BYTES // 4, dtype=cp.uint32) * cp.uint32(2654435761)
    flush = cp.empty(2 * b.gpu.l2_bytes // 4, dtype=cp.uint32)
    sink = cp.zeros(1, dtype=cp.float32)
    fn = b.fn("power_hbm", "power_hbm")
    blocks, threads = b.gpu.sm_count, 128 * (1 + HBM_STREAM_WARPGROUPS)
    tb = b.times(blocks)
    rows = []
    for n, (kind, k, loads) in burst_order(mixes, passes, seed):
        for ms in lengths:
            periods = max(1, int(ms * 1e-3 * 1.8e9 / HBM_PERIOD))
            args = (init, buffer, np.uint64(words), np.int32(kind == "mma_sync"), np.int32(k), np.int32(loads),
                    np.int32(HBM_PERIOD), np.int32(periods), np.int32(1), sink, tb)
            for between in betweens:
                clocks, spans = [], []
                start = cp.cuda.Event()
                end = cp.cuda.Event()
                start.record()
                for _ in range(bursts):
                    fn((blocks,), (threads,), args)
                    t = block_times(tb)  # synchronises: the host reads each launch's clock
                    clocks.append(clock_hz(t))
                    spans.append(float(t["ns1"].max() - t["ns0"].min()) * 1e-9)
                    if between == "flush":
                        flush.fill(1)
                end.record()
                end.synchronize()
                rows.append({
                    "pass": n, "tensor": kind, "tensor_per_period": k, "loads_per_thread": loads, "burst_ms": ms,
                    "between": between, "bursts": bursts, "clock_hz": float(np.median(clocks[bursts // 2:])),
                    "clock_first_hz": clocks[0], "launch_s": float(np.median(spans[bursts // 2:])),
                    "tensor_flops_per_clk_per_sm": k * (WGMMA_FLOPS if kind == "wgmma" else 4 * MMA_FLOPS) * periods
                    / float(np.median((t["clk1"] - t["clk0"]).astype(np.float64))),
                    "hbm_read_bytes_per_s": 16.0 * loads * periods * blocks * 128 * HBM_STREAM_WARPGROUPS
                    / float(np.median(spans[bursts // 2:])),
                    "duty": float(sum(spans) / (cp.cuda.get_elapsed_time(start, end) * 1e-3)),
                })
    return {
        "points": rows,
        "how": (
            f"power_hbm.cu's mixes {mixes} (napping), in launches of {lengths} ms, {bursts} per case, "
            f"{passes} pass(es) over the cases" + (f" shuffled anew each pass (seed {seed})" if seed is not None
                                                   else "") + ", each launch "
            "read back by the host (so a gap of a few tens of microseconds between launches), with nothing or a "
            "fill of twice the L2 between them; clock: clock64 over %globaltimer, median over blocks, then over "
            "the last half of the launches; duty: the launches' spans over the case's wall time"
        ),
    }


if __name__ == "__main__":
    raise SystemExit(main())
