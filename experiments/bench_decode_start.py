"""What a short launch pays for the state the L2 flush leaves: our decode kernel at short development shapes
and hbm_probe's ring_read at its "fixed" points, each timed after four preparations (development data for the
decode model; no test-set shape runs):

- write-flush: validate's flush, a 256 MiB write (make_flush), as every benchmark measures: cold data and code,
  the L2 full with part of it dirty;
- read-flush: a 256 MiB read instead (the membw microbenchmark's read_cg): cold data and code, the L2 full of
  clean lines, so nothing to write back;
- write-flush-warm-code: the write flush, then the same launch on other tensors of the same shape: the
  timed launch's data are cold and the L2 partly dirty, but its code and parameters were just used;
- warm: no flush, the previous call's data still in L2.

write-flush against read-flush is the cost of the flush's dirty lines; write-flush against
write-flush-warm-code the cost of fetching the kernel's code (97 KiB of SASS for the d128 split kernel, 5 KiB
for ring_read) after the flush evicted it. Each time is the GPU busy time of the timed launch's kernels (a
one-block copy_cg marker separates it from the preparation in the profile), median of CALLS.

    python3 -m flashsim.experiments.bench_decode_start [--out DIR]
writes DIR/decode-start.json and DIR/decode-start.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

HEADS = 32
CALLS = 7
FLUSH_BYTES = 256 << 20
MARKER = "copy_cg"
# (batch, group, seqlen_k, headdim, splits): decode-splits' short shapes and short development-set rows
DECODE = ((1, 8, 64, 128, 1), (1, 8, 64, 128, 2), (1, 8, 1024, 128, 1), (1, 8, 1024, 128, 2),
          (1, 8, 1024, 128, 8), (1, 1, 1024, 128, 8), (8, 4, 1024, 128, 4), (8, 8, 4096, 64, 8))  # fmt: skip
# hbm_probe's fixed points: (grid, bytes per block)
PROBE = ((1, 64 << 10), (132, 64 << 10), (132, 256 << 10), (264, 64 << 10), (264, 256 << 10), (132, 1 << 20))
CONDITIONS = ("write-flush", "read-flush", "write-flush-warm-code", "warm")


class Preparations:
    """The four preparations, each ending with the one-block marker that starts the timed launch's group."""

    def __init__(self, cp, gpu):
        from .calibrate_bench import BLOCK_TIME
        from .calibrate_gpu import load_module
        from .validate import make_flush

        module = load_module(cp, "membw", gpu.arch)
        self.write_flush = make_flush(cp, gpu)
        read, copy = module.get_function("read_cg"), module.get_function("copy_cg")
        big = cp.empty(FLUSH_BYTES, dtype=cp.uint8)
        small = cp.zeros(64, dtype=cp.uint8)
        sink = cp.zeros(1, dtype=cp.uint32)
        blocks = 4 * gpu.sm_count
        times = cp.empty(blocks * BLOCK_TIME.itemsize, dtype=cp.uint8)
        n16 = np.uint64(FLUSH_BYTES // 16)
        self.read_flush = lambda: read((blocks,), (512,), (big, n16, np.int32(1), sink, times))
        self.marker = lambda: copy((1,), (32,), (small, small[32:], np.uint64(1), times))

    def run(self, condition: str, warm_up) -> None:
        if condition in ("write-flush", "write-flush-warm-code"):
            self.write_flush()
        elif condition == "read-flush":
            self.read_flush()
        if condition == "write-flush-warm-code":
            warm_up()
        self.marker()


def timed(fn, prepare, prefix: str, per_call: int, calls: int = CALLS) -> list[dict[str, float]]:
    """Per call, the busy microseconds of the first `per_call` kernels named prefix... after the marker (the
    timed launch's own kernels: not the fills or copies around them), by name."""
    import torch

    from .validate import profiled_events

    fn()
    torch.cuda.synchronize()
    events = profiled_events(fn, prepare, calls)
    return after_marker([(e.name.split("(")[0].strip(), e.time_range.elapsed_us()) for e in events], prefix, per_call)


def after_marker(events: list[tuple[str, float]], prefix: str, per_call: int) -> list[dict[str, float]]:
    """(kernel name, busy us) in start order -> per marker, the first per_call kernels named prefix... after it."""
    out: list[dict[str, float]] = []
    left = 0
    for name, us in events:
        if name == MARKER:
            out.append({})
            left = per_call
        elif left and out and name.startswith(prefix):
            out[-1][name] = out[-1].get(name, 0.0) + us
            left -= 1
    return [c for c in out if c]


def decode_rows(prep: Preparations) -> list[dict]:
    import torch

    rows = []
    for batch, group, nk, d, splits in DECODE:
        rows += decode_shape(prep, batch, group, nk, d, splits)
        torch.cuda.empty_cache()
    return rows


def decode_shape(prep: Preparations, batch: int, group: int, nk: int, d: int, splits: int) -> list[dict]:
    import torch
    from flashsim.kernels import decode

    g = torch.Generator(device="cuda").manual_seed(0)
    hkv = HEADS // group

    def tensors():
        q = torch.randn(batch, HEADS, 1, d, device="cuda", dtype=torch.bfloat16, generator=g)
        k, v = (torch.randn(batch, hkv, nk, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        return q, k, v

    timed_args, other_args = tensors(), tensors()  # the warm-code launch reads other tensors

    def call(args):
        return decode(*args, splits=splits)

    rows = []
    for condition in CONDITIONS:
        calls = timed(lambda: call(timed_args), lambda c=condition: prep.run(c, lambda: call(other_args)),
                      "flashsim_decode", 2 if splits > 1 else 1)  # fmt: skip
        rows.append(_row("decode", f"b{batch}-g{group}-nk{nk}-d{d}-nq1-s{splits}", condition, calls,
                         {"batch": batch, "group": group, "seqlen_k": nk, "headdim": d, "splits": splits,
                          "blocks": batch * hkv * splits}))  # fmt: skip
        print(json.dumps({k: rows[-1][k] for k in ("case", "condition", "gpu_us", "kernel_us")}), flush=True)
    return rows


def probe_rows(prep: Preparations, cp, gpu) -> list[dict]:
    from .hbm_probe import Probe

    probe = Probe(cp, gpu)
    rows = []
    for grid, block_bytes in PROBE:
        rows += probe_point(prep, probe, gpu, grid, block_bytes)
    return rows


def probe_point(prep: Preparations, probe, gpu, grid: int, block_bytes: int) -> list[dict]:
    from .hbm_probe import DECODE_STAGES, DECODE_TILE

    k_max = 2 if grid > gpu.sm_count else 1
    launch, smem, _ = probe._launcher(DECODE_STAGES, DECODE_TILE, k_max, grid, block_bytes)
    if launch is None:
        return []
    probe.want.fill(k_max)
    fn = probe.module.get_function(f"ring_read_s{DECODE_STAGES}")
    half = probe.buf[probe.buf.size // 2:]  # the warm-code launch reads other bytes than the timed one

    def warm_up():
        probe.arrivals.fill(0)
        fn((grid,), (128,), (half, probe.want, probe.arrivals, np.uint64(block_bytes // 16),
                             np.uint32(DECODE_TILE // 16), probe.sink, probe.times), shared_mem=smem)  # fmt: skip

    rows = []
    for condition in CONDITIONS:
        calls = timed(launch, lambda c=condition: prep.run(c, warm_up), "ring_read", 1)
        rows.append(_row("probe", f"ring_read grid {grid} x {block_bytes >> 10} KiB", condition, calls,
                         {"blocks": grid, "block_bytes": block_bytes}))  # fmt: skip
        print(json.dumps({k: rows[-1][k] for k in ("case", "condition", "gpu_us")}), flush=True)
    return rows


def _row(what: str, case: str, condition: str, calls: list[dict[str, float]], extra: dict) -> dict:
    names = sorted({n for c in calls for n in c})
    return {"what": what, "case": case, "condition": condition, **extra,
            "gpu_us": statistics.median(sum(c.values()) for c in calls) if calls else None,
            "gpu_us_calls": [sum(c.values()) for c in calls],
            "kernel_us": {n: statistics.median(c.get(n, 0.0) for c in calls) for n in names}}  # fmt: skip


def markdown(rows: list[dict]) -> str:
    lines = ["| case | " + " | ".join(CONDITIONS) + " |", "|---|" + "---|" * len(CONDITIONS)]
    cases = list(dict.fromkeys(r["case"] for r in rows))
    for case in cases:
        cells = []
        for condition in CONDITIONS:
            r = next((r for r in rows if r["case"] == case and r["condition"] == condition), None)
            if r is None or r["gpu_us"] is None:
                cells.append("-")
                continue
            per = ", ".join(f"{n.rsplit('_', 1)[-1]} {t:.1f}" for n, t in r["kernel_us"].items()) if len(
                r["kernel_us"]) > 1 else ""  # fmt: skip
            cells.append(f"{r['gpu_us']:.1f}" + (f" ({per})" if per else ""))
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="experiments/results/h200")
    args = ap.parse_args(argv)
    import cupy as cp

    from .calibrate_gpu import read_gpu
    from .torch_provenance import torch_gpu_provenance

    gpu = read_gpu(cp)
    prep = Preparations(cp, gpu)
    rows = decode_rows(prep) + probe_rows(prep, cp, gpu)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = torch_gpu_provenance("python3 -m flashsim.experiments.bench_decode_start")
    (out / "decode-start.json").write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1) + "\n")
    (out / "decode-start.md").write_text(markdown(rows))
    print(f"wrote {out / 'decode-start.json'} and {out / 'decode-start.md'}")


if __name__ == "__main__":
    main()
