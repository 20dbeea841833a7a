"""Instruction fetch on the H200 (development data for the decode model's start and step costs): how long a warp
takes to run straight-line code new to its SM, and a loop whose body may overflow the instruction caches.

Nsight Compute on our decode kernel's short launches (results/h200/decode-fid/ncu/) finds most warp stall
samples waiting for instructions (`no_instruction`), in its run-once prologue and epilogue and in its loop
body. Kernel: kernels/microbench/ifetch.cu, ifetch_l<LINES>: LINES 128-byte lines of eight independent FFMAs
(one scheduler could issue a line in eight cycles), run `reps` times. Sweeps: lines (2 to 129 KiB of code),
warps per block (1, 4), blocks (1, every SM), reps (1: straight-line; 16: a loop), each after the L2 flush as
the benchmarks time a call, and after a warm-up launch of the same kernel. Times: GPU busy time from the CUDA
profiler (median of CALLS calls) and the blocks' own SM cycles (BlockTime, median over blocks).

    python3 -m flashsim.experiments.ifetch_probe [--out DIR]
writes DIR/ifetch-probe.json and DIR/ifetch-probe.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

LINES = (16, 32, 64, 128, 256, 272, 288, 304, 320, 384, 448, 512, 1024)  # ifetch.cu's instantiations
# ifetch.cu's branching kernels as (skip, lines of code): 2, 8, 16, 32 and 64 KiB each
BRANCH_POINTS = [(skip, n) for skip in (7, 23) for n in (16, 64, 128, 256, 512)]
# ifetch.cu's kernels in the shape of a forward attention kernel: (prologue, loop body, epilogue) lines
PATTERNS = ((8, 32, 8), (38, 155, 71), (38, 210, 71), (52, 165, 122), (233, 205, 57), (273, 203, 58),
            (191, 150, 75), (418, 149, 76))
PATTERN_STEPS, PATTERN_TILES = 4, 32
PAIR_LINES = (64, 128, 144, 160, 192, 256)  # ifetch.cu's ifetch_pair kernels: 8 to 32 KiB a loop
PAIR_REPS = 64
PAIR_SMEM_BYTES = 100 * 1024  # a block's dynamic shared memory: two blocks fit an SM, three do not
# ifetch.cu's ifetch_ahead kernels: (slow lines, then fast lines), straight on
AHEAD = ((16, 512), (64, 512), (256, 512), (512, 512), (256, 256))
LINE_BYTES = 128  # eight 16-byte SASS instructions
CALLS = 5
SHOWN = ("lines", "warps", "blocks", "reps", "start", "gpu_us", "block_cycles_median", "cycles_per_line")


def measure(cp, module, flush, lines: int, warps: int, blocks: int, reps: int, warm: bool, skip: int = 0) -> dict:
    """One point; skip > 0: the branching kernel ifetch_b<skip>_u<units> with `lines` 128-byte lines of code
    (two per unit at skip 7, four at 23), each unit one taken branch and nine instructions run."""
    from .calibrate_bench import BLOCK_TIME
    from .validate import gpu_calls

    units = lines // (2 if skip == 7 else 4)
    name = f"ifetch_b{skip}_u{units}" if skip else f"ifetch_l{lines}"
    fn = module.get_function(name)
    sink = cp.zeros(1, dtype=cp.float32)
    times = cp.zeros(blocks * BLOCK_TIME.itemsize, dtype=cp.uint8)
    head = (np.float32(0.999), np.float32(0.001), np.int32(reps)) + ((np.int32(1),) if skip else ())

    def launch():
        fn((blocks,), (32 * warps,), (*head, sink, times))

    def call():
        if warm:  # the same code just run on the same SMs: the second launch is the one timed
            launch()
        launch()

    launch()
    cp.cuda.Device().synchronize()
    us = [
        [e.time_range.elapsed_us() for e in w if e.name.split("(")[0].strip() == name]
        for w in gpu_calls(call, flush, CALLS)
    ]
    gpu_us = statistics.median(u[-1] for u in us if u)
    t = times.get().view(BLOCK_TIME)
    cycles = (t["clk1"] - t["clk0"]).astype(np.int64)
    ns = (t["ns1"].astype(np.int64) - t["ns0"].astype(np.int64)).astype(np.float64)
    run = units * 9 if skip else lines * 8  # instructions a warp runs per pass
    issue = run * reps * max(1, warps // 4)  # cycles one scheduler needs for its warps' instructions
    return {
        "kernel": name,
        "skip": skip,
        "units": units if skip else 0,
        "lines": lines,
        "code_bytes": lines * LINE_BYTES,
        "warps": warps,
        "blocks": blocks,
        "reps": reps,
        "start": "warm" if warm else "flush",
        "gpu_us": gpu_us,
        "gpu_us_calls": [u[-1] for u in us if u],
        "block_cycles_median": float(np.median(cycles)),
        "block_cycles_max": int(cycles.max()),
        "block_ghz": float(np.median(cycles / np.maximum(ns, 1))),
        "issue_cycles": issue,
        "cycles_per_line": float(np.median(cycles)) / (lines * reps),
        # a unit: nine instructions run and one taken branch (branching kernels only)
        **({"cycles_per_unit": float(np.median(cycles)) / (units * reps)} if skip else {}),
    }


def measure_pattern(cp, module, flush, pattern: tuple, blocks: int, causal: bool, warps: int = 4,
                    kind: str = "") -> dict:
    """One point of the attention-shaped code (ifetch_p<P>_l<L>_e<E>): PATTERN_TILES blocks' worth of
    prologue, loop (PATTERN_STEPS passes, or 1 to PATTERN_STEPS when causal) and epilogue per timed block,
    after a warm-up launch; cycles per tile and per line run. kind "": lines of independent FFMAs; "c": of
    dependent chains (ifetch_c_p...), issuing a line about as slowly as an attention kernel runs its code; "m":
    eight of each in turn (ifetch_m_p...)."""
    from .calibrate_bench import BLOCK_TIME
    from .validate import gpu_calls

    p, loop, e = pattern
    name = f"ifetch_{kind + '_' if kind else ''}p{p}_l{loop}_e{e}"
    fn = module.get_function(name)
    sink = cp.zeros(1, dtype=cp.float32)
    times = cp.zeros(blocks * BLOCK_TIME.itemsize, dtype=cp.uint8)
    args = (np.float32(0.999), np.float32(0.001), np.int32(PATTERN_STEPS), np.int32(int(causal)),
            np.int32(PATTERN_TILES), sink, times)

    def call():
        fn((blocks,), (32 * warps,), args)
        fn((blocks,), (32 * warps,), args)

    call()
    cp.cuda.Device().synchronize()
    us = [[e.time_range.elapsed_us() for e in w if e.name.split("(")[0].strip() == name]
          for w in gpu_calls(call, flush, CALLS)]
    t = times.get().view(BLOCK_TIME)
    cycles = (t["clk1"] - t["clk0"]).astype(np.int64)
    steps = [(1 + (i + b) % PATTERN_STEPS) if causal else PATTERN_STEPS for b in range(blocks)
             for i in range(PATTERN_TILES)]
    lines_run = (p + e) * PATTERN_TILES * blocks + loop * sum(steps)  # lines all blocks issue
    return {"kernel": name, "chain": kind == "c", "kind": kind or "independent", "prologue_lines": p,
            "loop_lines": loop, "epilogue_lines": e,
            "code_bytes": (p + loop + e) * LINE_BYTES, "blocks": blocks, "warps": warps, "causal": causal,
            "steps": PATTERN_STEPS, "tiles": PATTERN_TILES, "gpu_us": statistics.median(u[-1] for u in us if u),
            "block_cycles_median": float(np.median(cycles)), "block_cycles_max": int(cycles.max()),
            "lines_per_tile": lines_run / (PATTERN_TILES * blocks),
            "cycles_per_tile": float(np.median(cycles)) / PATTERN_TILES}


def _launch_records(cp, launch, times) -> list:
    """The blocks' BlockTime records of CALLS launches, after a first launch that warms the code into L2."""
    from .calibrate_bench import BLOCK_TIME

    records = []
    for call in range(CALLS + 1):
        launch()
        cp.cuda.Device().synchronize()
        if call:
            records.append(times.get().view(BLOCK_TIME))
    return records


def measure_pair(cp, module, gpu, lines: int, kind: str, mode: str, warps: int = 4) -> dict:
    """One point of ifetch_pair: mode "single" one block per SM (loop X), "same" two per SM both running X,
    "different" two per SM, one running X and the other Y (same shape, other instructions); after a warm-up
    launch (the code is in L2, as mid-kernel). Block cycles by slot, medians over CALLS launches."""
    from .calibrate_bench import BLOCK_TIME

    name = f"ifetch_pair_{kind + '_' if kind else ''}l{lines}"
    fn = module.get_function(name)
    fn.max_dynamic_shared_size_bytes = PAIR_SMEM_BYTES
    blocks = gpu.sm_count * (1 if mode == "single" else 2)
    sink = cp.zeros(1, dtype=cp.float32)
    slots = cp.zeros(1024, dtype=cp.int32)
    times = cp.zeros(blocks * BLOCK_TIME.itemsize, dtype=cp.uint8)
    args = (np.float32(0.999), np.float32(0.001), np.int32(PAIR_REPS), np.int32(mode != "different"), slots,
            sink, times)

    def launch():  # each launch deals its blocks their slots afresh
        slots.fill(0)
        fn((blocks,), (32 * warps,), args, shared_mem=PAIR_SMEM_BYTES)

    records = _launch_records(cp, launch, times)
    cycles = [(t["clk1"] - t["clk0"]).astype(np.int64) for t in records]
    per_sm = [np.bincount(t["smid"], minlength=gpu.sm_count).max() for t in records]
    c = np.median(np.stack(cycles), axis=0)
    run = lines * PAIR_REPS
    return {"kernel": name, "kind": kind or "independent", "lines": lines, "code_bytes": lines * LINE_BYTES,
            "mode": mode, "blocks": blocks, "warps": warps, "reps": PAIR_REPS, "most_blocks_per_sm": int(max(per_sm)),
            "block_cycles_median": float(np.median(c)), "block_cycles_max": float(c.max()),
            "cycles_per_line": float(np.median(c)) / run, "cycles_per_line_max": float(c.max()) / run}


def measure_ahead(cp, module, gpu, slow: int, fast: int, warps: int, blocks: int) -> dict:
    """One point of ifetch_ahead: `slow` lines of dependent chains, then `fast` lines of independent FFMAs, once,
    after a launch of the same kernel (its code in L2; over 32 KiB of it, so its first lines are no longer
    on the SM). Block cycles, median over CALLS launches and the blocks."""
    from .calibrate_bench import BLOCK_TIME

    name = f"ifetch_ahead_s{slow}_f{fast}"
    fn = module.get_function(name)
    sink = cp.zeros(1, dtype=cp.float32)
    times = cp.zeros(blocks * BLOCK_TIME.itemsize, dtype=cp.uint8)
    args = (np.float32(0.999), np.float32(0.001), sink, times)
    records = _launch_records(cp, lambda: fn((blocks,), (32 * warps,), args), times)
    c = np.stack([(t["clk1"] - t["clk0"]).astype(np.int64) for t in records])
    return {"kernel": name, "slow_lines": slow, "fast_lines": fast, "warps": warps, "blocks": blocks,
            "block_cycles_median": float(np.median(c)), "block_cycles_min": int(c.min()),
            "block_cycles_max": int(c.max())}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="ifetch-probe-out")
    ap.add_argument(
        "--sweep",
        choices=("straight", "branch", "pattern", "pair", "ahead"),
        default="straight",
        help="straight: ifetch_l (ifetch-probe.*); branch: ifetch_b, one block (ifetch-branch.*); pattern: "
        "ifetch_p, code shaped as forward attention kernels, one and two blocks per SM (ifetch-pattern.*); pair: "
        "ifetch_pair, two blocks per SM in the same or in different loops (ifetch-pair.*); ahead: ifetch_ahead, "
        "slow code then fast code the SM lacks (ifetch-ahead.*)",
    )
    args = ap.parse_args(argv)
    from flashsim.errors import FlashsimError

    from .calibrate_gpu import load_module, read_gpu, require_gpu
    from .torch_provenance import torch_gpu_provenance
    from .validate import make_flush

    try:
        cp = require_gpu("the instruction-fetch microbenchmark")
    except FlashsimError as exc:
        print(f"ifetch_probe: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    gpu = read_gpu(cp)
    module, flush = load_module(cp, "ifetch", gpu.arch), make_flush(cp, gpu)
    branch = args.sweep == "branch"
    rows = []
    kinds, modes = ("", "c", "m"), ("single", "same", "different")
    sweeps = {  # the sweeps of one file each: its stem and its points, measured as they are drawn
        "ahead": ("ifetch-ahead", (measure_ahead(cp, module, gpu, slow, fast, warps, blocks)
                                   for blocks in (1, gpu.sm_count) for warps in (4, 8) for slow, fast in AHEAD)),
        "pair": ("ifetch-pair", (measure_pair(cp, module, gpu, lines, kind, mode)
                                 for kind in kinds for lines in PAIR_LINES for mode in modes)),
        "pattern": ("ifetch-pattern", (measure_pattern(cp, module, flush, pattern, blocks, causal, kind=kind)
                                       for kind in kinds for pattern in PATTERNS
                                       for blocks in (gpu.sm_count, 2 * gpu.sm_count) for causal in (False, True))),
    }
    if args.sweep in sweeps:
        stem, points = sweeps[args.sweep]
        for row in points:
            rows.append(row)
            print(json.dumps(row), flush=True)
        meta = torch_gpu_provenance(f"python3 -m flashsim.experiments.ifetch_probe --sweep {args.sweep}")
        (out / f"{stem}.json").write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1) + "\n")
        print(f"wrote {out / (stem + '.json')} ({len(rows)} points) in {time.monotonic() - t0:.0f} s")
        return
    for reps in (1, 16):
        for blocks in (1,) if branch else (1, gpu.sm_count):
            for warps in (1, 4):
                for warm in (False, True):
                    for skip, lines in BRANCH_POINTS if branch else [(0, n) for n in LINES]:
                        row = measure(cp, module, flush, lines, warps, blocks, reps, warm, skip)
                        rows.append(row)
                        print(json.dumps({k: row[k] for k in ("skip", *SHOWN)}), flush=True)
    stem = "ifetch-branch" if branch else "ifetch-probe"
    command = "python3 -m flashsim.experiments.ifetch_probe" + (" --sweep branch" if branch else "")
    meta = torch_gpu_provenance(command)
    (out / f"{stem}.json").write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1) + "\n")
    lines = ["| skip | reps | blocks | warps | start | KiB of code | GPU us | block cycles | cycles per line | "
             "cycles per unit | issue cycles |", "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        unit = f"{r['cycles_per_unit']:.1f}" if "cycles_per_unit" in r else "-"
        lines.append(f"| {r['skip'] or '-'} | {r['reps']} | {r['blocks']} | {r['warps']} | {r['start']} | "
                     f"{r['code_bytes'] / 1024:.0f} | {r['gpu_us']:.2f} | {r['block_cycles_median']:.0f} | "
                     f"{r['cycles_per_line']:.1f} | {unit} | {r['issue_cycles']} |")  # fmt: skip
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / (stem + '.json')} ({len(rows)} points) in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
