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
        text = smi.communicate(timeout=5)[0]
        samples = _smi_rows(text)
        for row, (start, end) in zip(rows, windows, strict=True):
            row.update(_window(samples, start, end))
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
