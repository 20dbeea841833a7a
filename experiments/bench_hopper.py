"""Forward TFLOP/s of our FA3 kernels (v3 bf16, v3-fp8) beside PyTorch SDPA's cuDNN and flash backends.

The FA2/FA3 papers' grid: seqlen 512..16k, batch = 16384 / seqlen, d64 x 32 heads and d128 x 16 heads,
causal off and on (--headdims adds 96, 192,
256). FLOPs by the papers' convention (4 B H N^2 d, halved for causal). v3-fp8 is timed end to
end from bf16 inputs (the fused quantisation pre-pass, then the attention kernel), as a user calls it; the
pre-pass alone, the attention kernel alone and the torch reference pre-pass are timed beside it.

    python -m flashsim.experiments.bench_hopper bench --out experiments/results/h200
    python -m flashsim.experiments.bench_hopper fp8 --out OUT   # v3-fp8 end to end vs v3 bf16, d64 and d128
    python -m flashsim.experiments.bench_hopper bench --headdims 96 192 256 --alt-tile --name hopper-headdims
    python -m flashsim.experiments.bench_hopper smoke          # one small launch per kernel (for compute-sanitizer)
    python -m flashsim.experiments.bench_hopper causal1k --out OUT  # grids / Q buffering, short problems
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from pathlib import Path

from flashsim.experiments.torch_provenance import torch_gpu_provenance

SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEADDIMS = (64, 128)  # the default grid's head dims
TOKENS = 16384
GRID = {"auto": None, "plain": False}  # --grid: v3's own choice, or one thread block per tile
_persistent = None


def _time_ms(fn, warmup: int = 3, iters: int = 10, back_to_back: bool = False) -> float:
    """Median over `iters` launches of CUDA-event time, after `warmup` launches. back_to_back: the mean of
    `iters` calls queued without waiting, so the host's launch work (~0.1-0.2 ms per call through ctypes)
    overlaps the GPU's, as in a model's forward pass; per-call timing adds it wherever the GPU waits for it."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    if back_to_back:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _flops(b, h, n, d, causal) -> float:
    f = 4.0 * b * h * n * n * d
    return f / 2 if causal else f


def _sdpa(backend):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]

    def call(q, k, v, causal):
        with sdpa_kernel(chosen):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return call


def _runner(name: str, q, k, v, causal: bool):
    """A no-argument callable that runs `name` once on (q, k, v)."""
    import torch
    from flashsim.kernels import hopper, hopper_fp8

    out = torch.empty_like(q)
    if name == "v3":
        return lambda: hopper.attention(q, k, v, causal=causal, out=out, persistent=_persistent)
    if name == "v3 other grid":  # the persistence choice v3 does not make by default
        return lambda: hopper.attention(q, k, v, causal=causal, out=out, persistent=causal)
    if name == "v3 alt tile":  # the table's other ping-pong tile for this head dim and mask
        tiling = alternative_tile(q.shape[-1], causal).tiling
        return lambda: hopper.attention(q, k, v, causal=causal, tiling=tiling, out=out, persistent=_persistent)
    bm, bn = hopper.choose_tile("v3-fp8", q.shape[-1], causal)
    if name == "v3-fp8":  # end to end: the fused pre-pass, then the attention kernel
        return lambda: hopper_fp8.attention(q, k, v, causal=causal, out=out, persistent=_persistent)
    if name == "v3-fp8 kernel":  # the attention kernel alone, on inputs quantised once beforehand
        qq, kq, vt, *scales = hopper_fp8.prepare(q, k, v, bm, bn)
        tile = hopper_fp8._Tile(bm, bn)
        return lambda: hopper.run("v3-fp8", qq, kq, vt, causal, tile, "pingpong", out, scales, persistent=_persistent)
    if name == "v3-fp8 prepass":
        return lambda: hopper_fp8.prepare(q, k, v, bm, bn, fused=True)
    if name == "v3-fp8 torch prepass":
        return lambda: hopper_fp8.prepare(q, k, v, bm, bn, fused=False)
    fn = _sdpa(name.removeprefix("sdpa-"))
    return lambda: fn(q, k, v, causal)


def alternative_tile(d: int, causal: bool):
    """The first bf16 ping-pong row of v3_tiles.tsv for (d, causal) that is not the default, or None."""
    from flashsim.kernels import hopper_tiles

    for t in hopper_tiles.tiles("v3"):
        if (t.dtype, t.headdim, t.causal, t.schedule, t.default) == ("bf16", d, causal, "pingpong", False):
            return t
    return None


PREPASSES = ("v3-fp8 prepass", "v3-fp8 torch prepass")


def prepass_bytes(b: int, h: int, n: int, d: int, causal: bool) -> int:
    """HBM bytes the pre-pass must move: Q, K, V read in 16 bits, written in e4m3 (V^T padded to whole
    key blocks), one fp32 scale per block."""
    from flashsim.kernels import hopper

    bm, bn = hopper.choose_tile("v3-fp8", d, causal)
    q_blocks, kv_blocks = -(-n // bm), -(-n // bn)
    return b * h * (3 * n * d * 2 + 2 * n * d + kv_blocks * bn * d + 4 * (q_blocks + 2 * kv_blocks))


def measure(d: int, n: int, causal: bool, methods, back_to_back: bool = False) -> dict:
    import torch

    b, h = TOKENS // n, 2048 // d
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flops = _flops(b, h, n, d, causal)
    row = {"d": d, "seqlen": n, "batch": b, "heads": h, "causal": causal}
    for name in methods:
        if name == "v3 alt tile" and alternative_tile(d, causal) is None:
            continue  # only head dims with a second tile
        try:
            ms = _time_ms(_runner(name, q, k, v, causal), iters=20 if back_to_back else 10, back_to_back=back_to_back)
            row[f"{name} ms"] = round(ms, 4)
            if name in PREPASSES:
                row[f"{name} GB/s"] = round(prepass_bytes(b, h, n, d, causal) / ms / 1e6, 1)
            else:
                row[f"{name} TFLOP/s"] = round(flops / ms / 1e9, 1)
        except Exception as exc:  # a backend refusing a shape is a result, not a crash
            row[f"{name} error"] = f"{type(exc).__name__}: {exc}"[:200]
    return row


def provenance(argv, timing: str = "CUDA events, median of 10 launches after 3 warm-ups") -> dict:
    return torch_gpu_provenance(
        "python -m flashsim.experiments.bench_hopper " + " ".join(argv), timing=timing + "; clocks as found"
    )


def to_markdown(meta: dict, rows: list[dict], methods) -> str:
    lines = [
        "# FA3 forward on H200: our v3 / v3-fp8 kernels vs PyTorch SDPA",
        "",
        "Provenance: " + "; ".join(f"{k} {v}" for k, v in meta.items()),
        "",
        "TFLOP/s (forward, 4 B H N^2 d, halved for causal); batch = 16384 / seqlen. v3: persistent grid when",
        "non-causal, one block per tile when causal; 'v3 other grid' is the opposite choice. v3-fp8: end to end",
        "from bf16 (fused pre-pass + attention; block scales + incoherent processing); the pre-pass alone, the",
        "attention kernel alone ('v3-fp8 kernel') and the torch pre-pass are in the JSON.",
        "",
        "| d | causal | seqlen | " + " | ".join(methods[:5]) + " | v3 / cuDNN | fp8 / v3 |",
        "|---|---|---|" + "---|" * 7,
    ]
    for r in rows:
        vals = [str(r.get(f"{m} TFLOP/s", "err")) for m in methods[:5]]
        v3, cudnn, fp8 = (r.get(f"{m} TFLOP/s") for m in ("v3", "sdpa-cudnn", "v3-fp8"))
        ratio = f"{v3 / cudnn:.2f}" if v3 and cudnn else "-"
        speed = f"{fp8 / v3:.2f}" if fp8 and v3 else "-"
        causal = "yes" if r["causal"] else "no"
        lines.append(f"| {r['d']} | {causal} | {r['seqlen']} | {' | '.join(vals)} | {ratio} | {speed} |")
    errors = [(r["d"], r["seqlen"], r["causal"], k, v) for r in rows for k, v in r.items() if k.endswith("error")]
    if errors:
        lines += ["", "Errors:"] + [f"- d{d} N{n} causal={c} {k}: {v}" for d, n, c, k, v in errors]
    return "\n".join(lines) + "\n"


def cmd_bench(args) -> int:
    global _persistent
    _persistent = GRID[args.grid]
    methods = ["v3", "v3-fp8", "sdpa-cudnn", "sdpa-flash", "v3 other grid", "v3-fp8 kernel", "v3-fp8 prepass"]
    methods += ["v3 alt tile"] if args.alt_tile else []
    seqlens = args.seqlens or ((1024, 4096, 16384) if args.quick else SEQLENS)
    rows = []
    for d in args.headdims:
        for causal in (False, True):
            for n in seqlens:
                row = measure(d, n, causal, methods)
                rows.append(row)
                print(json.dumps(row), flush=True)
    meta = provenance(sys.argv[1:])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1) + "\n")
    md = to_markdown(meta, rows, methods)
    (out / f"{args.name}.md").write_text(md)
    print(md)
    return 0


FP8_METHODS = ("v3", "v3-fp8", "v3-fp8 kernel", "v3-fp8 prepass", "v3-fp8 torch prepass")


def fp8_markdown(meta: dict, rows: list[dict]) -> str:
    lines = [
        "# v3-fp8 end to end vs v3 bf16 on H200 (forward, bf16 inputs)",
        "",
        "Provenance: " + "; ".join(f"{k} {v}" for k, v in meta.items()),
        "",
        "TFLOP/s (4 B H N^2 d, halved for causal); batch = 16384 / seqlen; each the mean of 20 calls queued",
        "back to back (the host's launch work overlaps the GPU's). 'fp8 e2e': the fused pre-pass and the",
        "attention kernel, as hopper_fp8.attention runs them; 'fp8 kernel': the attention kernel alone. Pre-pass:",
        "its time and the HBM bytes it must move per second; torch pre-pass: the reference implementation.",
        "",
        "| d | causal | seqlen | v3 bf16 | fp8 e2e | fp8 kernel | pre-pass ms | pre-pass GB/s | torch pre-pass ms "
        "| e2e / bf16 | kernel / bf16 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        bf16, e2e, kern = (r.get(f"{m} TFLOP/s") for m in ("v3", "v3-fp8", "v3-fp8 kernel"))
        cells = [str(x if x is not None else "err") for x in (bf16, e2e, kern)]
        cells += [str(r.get(k, "err")) for k in ("v3-fp8 prepass ms", "v3-fp8 prepass GB/s", "v3-fp8 torch prepass ms")]
        cells += [f"{e2e / bf16:.2f}" if e2e and bf16 else "-", f"{kern / bf16:.2f}" if kern and bf16 else "-"]
        lines.append(f"| {r['d']} | {'yes' if r['causal'] else 'no'} | {r['seqlen']} | {' | '.join(cells)} |")
    errors = [(r["d"], r["seqlen"], r["causal"], k, v) for r in rows for k, v in r.items() if k.endswith("error")]
    if errors:
        lines += ["", "Errors:"] + [f"- d{d} N{n} causal={c} {k}: {v}" for d, n, c, k, v in errors]
    return "\n".join(lines) + "\n"


def cmd_fp8(args) -> int:
    """v3-fp8 end to end (pre-pass shown separately) against v3 bf16, seqlen 1k..16k, per head dim. The
    files are rewritten after every row, so a run cut short keeps what it measured."""
    rows = []
    meta = provenance(sys.argv[1:], "CUDA events, mean of 20 calls queued back to back after 3 warm-ups")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def write(rmse: dict) -> str:
        (out / "fp8-bench.json").write_text(
            json.dumps({"provenance": meta, "rows": rows, "fp8_rmse": rmse}, indent=1) + "\n"
        )
        md = fp8_markdown(meta, rows) + (_rmse_markdown(rmse) if rmse else "")
        (out / "fp8-bench.md").write_text(md)
        return md

    rmse = {"non-causal": fp8_rmse_table(), "causal": fp8_rmse_table(causal=True)}
    for d in args.headdims:
        for causal in (False, True) if args.causal else (False,):
            for n in args.seqlens:
                row = measure(d, n, causal, FP8_METHODS, back_to_back=True)
                rows.append(row)
                print(json.dumps(row), flush=True)
                write(rmse)
    print(write(rmse))
    return 0


ORDER_METHODS = {  # name: (persistent grid, section) of hopper.attention; None: the call's default
    "per tile, head order": (False, 0),
    "per tile, sections": (False, None),
    "persistent, head order": (True, 0),
    "persistent, sections": (True, None),
}


def _order_calls(q, k, v) -> dict:
    """One no-argument call per ORDER_METHODS entry, causal, and cuDNN's."""
    import torch
    from flashsim.kernels import hopper

    out = torch.empty_like(q)
    calls = {
        m: (lambda p=p, s=s: hopper.attention(q, k, v, causal=True, out=out, persistent=p, section=s))
        for m, (p, s) in ORDER_METHODS.items()
    }
    cudnn = _sdpa("cudnn")
    calls["sdpa-cudnn"] = lambda: cudnn(q, k, v, True)
    return calls


def cmd_order(args) -> int:
    """v3's causal tile orders (v3_tile_scheduler.cuh) against cuDNN: GPU busy time from the profiler, L2
    flushed before each call (validate.gpu_work), median of 3 calls, so host launch work is left out."""
    import cupy as cp
    import torch
    from flashsim.algorithms import tile_order

    from .bench_decode import busy_seconds
    from .calibrate_gpu import read_gpu
    from .validate import make_flush

    flush = make_flush(cp, read_gpu(cp))
    rows = []
    for d in args.headdims:
        for n in args.seqlens:
            b, h = TOKENS // n, 2048 // d
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            flops = _flops(b, h, n, d, True)
            row = {"d": d, "seqlen": n, "batch": b, "heads": h, "causal": True,
                   "section": tile_order.section_pairs(True, n, d, 2, 1, b * h)}  # fmt: skip
            for name, fn in _order_calls(q, k, v).items():
                try:
                    seconds, _ = busy_seconds(fn, flush)
                    row[f"{name} us"] = round(seconds * 1e6, 1)
                    row[f"{name} TFLOP/s"] = round(flops / seconds / 1e12, 1)
                except Exception as exc:  # a backend refusing a shape is a result, not a crash
                    row[f"{name} error"] = f"{type(exc).__name__}: {exc}"[:200]
            rows.append(row)
            print(json.dumps(row), flush=True)
    meta = provenance(sys.argv[1:], "GPU busy time (CUPTI kernel durations), L2 flushed, median of 3 calls")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "v3-causal-order.json").write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1) + "\n")
    names = [*ORDER_METHODS, "sdpa-cudnn"]
    lines = ["# v3 causal tile orders vs cuDNN (H200, bf16, batch = 16384 / seqlen, 2048 / d heads)", "",
             "Provenance: " + "; ".join(f"{k} {v}" for k, v in meta.items()), "",
             "TFLOP/s (causal: 2 B H N^2 d). 'sections': the (batch, head) pairs per section of",
             "algorithms.tile_order.section_pairs, each section's query blocks taken longest first across its",
             "heads; 'head order': one head after another.",
             "", "| d | seqlen | pairs/section | " + " | ".join(names) + " | best / cuDNN |",
             "|---|---|---|" + "---|" * (len(names) + 1)]  # fmt: skip
    for r in rows:
        vals = [r.get(f"{m} TFLOP/s") for m in names]
        best = max((x for x in vals[:-1] if x), default=None)
        ratio = f"{best / vals[-1]:.2f}" if best and vals[-1] else "-"
        cells = " | ".join(str(x if x is not None else "err") for x in vals)
        lines.append(f"| {r['d']} | {r['seqlen']} | {r['section']} | {cells} | {ratio} |")
    md = "\n".join(lines) + "\n"
    (out_dir / "v3-causal-order.md").write_text(md)
    print(md)
    return 0


def cmd_versus(args) -> int:
    """v3 as a user calls it (its default grid, tile and order) against cuDNN, causal and not: GPU busy time,
    L2 flushed, median of 3 calls (the comparison issue targets are stated in)."""
    import cupy as cp
    import torch
    from flashsim.kernels import hopper

    from .bench_decode import busy_seconds
    from .calibrate_gpu import read_gpu
    from .validate import make_flush

    flush = make_flush(cp, read_gpu(cp))
    cudnn = _sdpa("cudnn")
    rows = []
    for d in args.headdims:
        for causal in (False, True):
            for n in args.seqlens:
                b, h = TOKENS // n, 2048 // d
                q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                out = torch.empty_like(q)
                row: dict = {"d": d, "seqlen": n, "batch": b, "heads": h, "causal": causal}
                calls = {"v3": functools.partial(hopper.attention, q, k, v, causal=causal, out=out),
                         "sdpa-cudnn": functools.partial(cudnn, q, k, v, causal)}  # fmt: skip
                for name, fn in calls.items():
                    seconds, _ = busy_seconds(fn, flush)
                    row[f"{name} TFLOP/s"] = round(_flops(b, h, n, d, causal) / seconds / 1e12, 1)
                row["v3 / cuDNN"] = round(row["v3 TFLOP/s"] / row["sdpa-cudnn TFLOP/s"], 3)
                rows.append(row)
                print(json.dumps(row), flush=True)
    meta = provenance(sys.argv[1:], "GPU busy time (CUPTI kernel durations), L2 flushed, median of 3 calls")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "v3-vs-cudnn.json").write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1) + "\n")
    lines = ["# v3 (default grid, tile and order) vs cuDNN on the H200, bf16, batch = 16384 / seqlen, 2048 / d heads",
             "", "Provenance: " + "; ".join(f"{k} {v}" for k, v in meta.items()), "",
             "| d | causal | seqlen | v3 TFLOP/s | cuDNN TFLOP/s | v3 / cuDNN |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['d']} | {'yes' if r['causal'] else 'no'} | {r['seqlen']} | {r['v3 TFLOP/s']} | "
                     f"{r['sdpa-cudnn TFLOP/s']} | {r['v3 / cuDNN']:.2f} |")  # fmt: skip
    md = "\n".join(lines) + "\n"
    (out_dir / "v3-vs-cudnn.md").write_text(md)
    print(md)
    return 0


def causal1k_variants(d: int, causal: bool) -> dict[str, dict]:
    """hopper.attention keyword arguments of each way to run v3 (bf16) on short problems: the default, and
    for every tile built with more buffering (schedules pingpong-q2, -s3, -q2s3) and the plain ping-pong
    kernel of the same tile: one Q buffer, one block per tile (causal only) and on the persistent grid
    taking every grid-th tile; two Q buffers, persistent, every grid-th tile and tiles from the counter."""
    from flashsim.kernels import hopper_tiles

    rows = [t for t in hopper_tiles.tiles("v3") if (t.dtype, t.headdim, t.causal) == ("bf16", d, causal)]
    tiles = {(t.block_m, t.block_n) for t in rows if t.schedule.startswith("pingpong-")}
    variants: dict[str, dict] = {"default": {}}
    for t in rows:
        if (t.block_m, t.block_n) not in tiles or not t.schedule.startswith("pingpong"):
            continue
        name, kw = f"{t.block_m}x{t.block_n} {t.schedule}", {"tiling": t.tiling, "schedule": t.schedule}
        if t.q_buffers == 1:
            if causal:
                variants[f"{name} per tile"] = {**kw, "persistent": False}
            variants[f"{name} persistent"] = {**kw, "persistent": True}
        else:
            variants[f"{name} every grid-th"] = {**kw, "counted": False}
            variants[f"{name} counted"] = kw
    return variants


CAUSAL1K_SHAPES = ((True, 1024), (True, 512), (True, 2048), (False, 1024), (True, 4096))  # most wanted first


def cmd_causal1k(args) -> int:
    """Short problems, each variant of causal1k_variants against cuDNN: GPU busy time, L2 flushed, median of
    `--calls` calls. The files are rewritten after every shape, so a run cut short keeps what it measured."""
    import time

    import cupy as cp
    import torch
    from flashsim.kernels import hopper

    from .calibrate_gpu import read_gpu
    from .validate import gpu_work, make_flush

    flush = make_flush(cp, read_gpu(cp))
    cudnn = _sdpa("cudnn")
    meta = provenance(sys.argv[1:], f"GPU busy time (CUPTI kernel durations), L2 flushed, median of {args.calls} calls")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    start = time.monotonic()
    for causal, n in CAUSAL1K_SHAPES:
        for d in args.headdims:
            if time.monotonic() - start > args.budget:
                print(f"budget of {args.budget} s spent: d{d} N{n} causal={causal} and later shapes left out")
                break
            b, h = TOKENS // n, 2048 // d
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            out = torch.empty_like(q)
            flops = _flops(b, h, n, d, causal)
            calls = {name: functools.partial(hopper.attention, q, k, v, causal=causal, out=out, **kw)
                     for name, kw in causal1k_variants(d, causal).items()
                     if not (args.skip_buffered and kw.get("schedule", "pingpong") != "pingpong")}  # fmt: skip
            calls["sdpa-cudnn"] = functools.partial(cudnn, q, k, v, causal)
            for name, fn in calls.items():
                row = {"d": d, "seqlen": n, "batch": b, "heads": h, "causal": causal, "variant": name}
                try:
                    fn()  # warm-up (and the first use's module load)
                    busy, _ = gpu_work(fn, flush, calls=args.calls)
                    seconds = statistics.median(busy)
                    row["us"] = round(seconds * 1e6, 1)
                    row["TFLOP/s"] = round(flops / seconds / 1e12, 1)
                    row["spread"] = round((max(busy) - min(busy)) / seconds, 3)
                except Exception as exc:  # a variant refusing a shape is a result, not a crash
                    row["error"] = f"{type(exc).__name__}: {exc}"[:200]
                rows.append(row)
                print(json.dumps(row), flush=True)
            cudnn_tf = rows[-1].get("TFLOP/s")
            for r in rows[-len(calls) :]:
                if cudnn_tf and r.get("TFLOP/s"):
                    r["/ cuDNN"] = round(r["TFLOP/s"] / cudnn_tf, 3)
            _write_causal1k(out_dir, meta, rows)
    print(_write_causal1k(out_dir, meta, rows))
    return 0


def _write_causal1k(out_dir: Path, meta: dict, rows: list[dict]) -> str:
    (out_dir / "causal1k.json").write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1) + "\n")
    lines = ["# v3 variants on short problems vs cuDNN (H200, bf16, batch = 16384 / seqlen, 2048 / d heads)", "",
             "Provenance: " + "; ".join(f"{k} {v}" for k, v in meta.items()), "",
             "Variants: 'default' as a caller gets it; else TILE SCHEDULE GRID. Schedules: pingpong (FA3's, one Q",
             "buffer, two K/V stages), -q2 two Q buffers (the next tile's Q loads while the current one runs),",
             "-s3 three K/V stages. Grids: 'per tile' one block per tile; 'persistent' / 'every grid-th' one block",
             "per SM taking every grid-th tile; 'counted' one block per SM taking the next tile from a counter.", "",
             "| d | causal | seqlen | variant | us | TFLOP/s | / cuDNN | spread |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        cells = [str(r.get(key, r.get("error", "-") if key == "us" else "-")) for key in ("us", "TFLOP/s", "/ cuDNN",
                                                                                          "spread")]  # fmt: skip
        lines.append(f"| {r['d']} | {'yes' if r['causal'] else 'no'} | {r['seqlen']} | {r['variant']} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    md = "\n".join(lines) + "\n"
    (out_dir / "causal1k.md").write_text(md)
    return md


def cmd_prepass(args) -> int:
    """The fused pre-pass alone per cluster size (thread blocks per quantisation block), bf16, 16k tokens."""
    import torch
    from flashsim.kernels import fp8_prepass, hopper, hopper_fp8

    for d in (128, 64):
        for n in (1024, 4096, 16384):
            b, h = TOKENS // n, 2048 // d
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            bm, bn = hopper.choose_tile("v3-fp8", d, False)
            row = {"d": d, "seqlen": n}
            for cluster in fp8_prepass.CLUSTERS:
                if fp8_prepass.chunks_per_thread(bm, bn, d, cluster):
                    args = (q, k, v, bm, bn)
                    call = lambda a=args, c=cluster: hopper_fp8.prepare(*a, fused=True, cluster=c)  # noqa: E731
                    ms = _time_ms(call, iters=20, back_to_back=True)
                    row[f"cluster {cluster} ms"] = round(ms, 4)
                    row[f"cluster {cluster} GB/s"] = round(prepass_bytes(b, h, n, d, False) / ms / 1e6, 1)
            print(json.dumps(row), flush=True)
    return 0


def cmd_smoke(args) -> int:
    """One small launch of each default kernel; prints the max error against an fp32 reference."""
    import torch
    from flashsim.kernels import hopper, hopper_fp8

    torch.manual_seed(0)
    worst = 0.0
    cases = ((128, 300, False, 1, 2), (128, 300, True, 1, 2), (64, 200, False, 1, 2), (64, 200, True, 1, 2))
    # the last case has 5 x 64 = 320 tiles, so a persistent block runs several
    small = (cases[1], cases[2], (128, 520, False, 4, 16))
    for d, n, causal, b, h in small if args.small else (*cases, small[2]):
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ref = _math_ref(q, k, v, causal)
        outs = {"v3": hopper.attention(q, k, v, causal=causal), "v3-fp8": hopper_fp8.attention(q, k, v, causal=causal)}
        for name, out in outs.items():
            err = (out.float() - ref).abs().max().item()
            print(f"smoke {name} d{d} N{n} causal={causal}: max err {err:.2e}", flush=True)
            if not math.isfinite(err):
                return 1
            worst = max(worst, err if name == "v3" else 0.0)
    return 0 if worst < 0.05 else 1


def _math_ref(q, k, v, causal):
    """fp32 attention from matmuls and softmax (no fused kernel, so sanitizers see only ours)."""
    import torch

    s = q.float() @ k.float().transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v.float()


def fp8_outliers(b, h, n, d, seed=0):
    """The FA3 paper's fp8 test inputs: N(0, 1) + N(0, 100) * Bernoulli(0.001), in bf16."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)

    def one():
        x = torch.randn(b, h, n, d, generator=gen, device="cuda")
        spikes = torch.randn(b, h, n, d, generator=gen, device="cuda") * 10
        mask = torch.rand(b, h, n, d, generator=gen, device="cuda") < 0.001
        return (x + spikes * mask).to(torch.bfloat16)

    return one(), one(), one()


def fp8_rmse_table(b=2, h=4, n=2048, d=128, causal=False) -> dict:
    """RMSE vs fp64 attention on the outlier inputs: SDPA bf16, v3 bf16, v3-fp8 per scaling choice."""
    import torch
    from flashsim.kernels import hopper, hopper_fp8

    q, k, v = fp8_outliers(b, h, n, d)
    s = q.double() @ k.double().transpose(-1, -2) * d**-0.5
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    ref = torch.softmax(s, -1) @ v.double()

    def rmse(x):
        return ((x.double() - ref) ** 2).mean().sqrt().item()

    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    rows = {"sdpa bf16": rmse(sdpa), "v3 bf16": rmse(hopper.attention(q, k, v, causal=causal))}
    for scaling in ("tensor", "block"):
        for ip in (False, True):
            out = hopper_fp8.attention(q, k, v, causal=causal, scaling=scaling, incoherent_processing=ip)
            rows[f"fp8 {scaling} scale{' + incoherent' if ip else ''}"] = rmse(out)
    return rows


def _rmse_markdown(rmse: dict) -> str:
    lines = [
        "",
        "## FP8 RMSE vs fp64 (inputs N(0,1) + N(0,100) * Bernoulli(0.001); B 2, H 4, N 2048, d128)",
        "",
        "Block scales run the fused pre-pass, tensor scales the torch one.",
        "",
        "| method | non-causal | causal |",
        "|---|---|---|",
    ]
    lines += [f"| {m} | {rmse['non-causal'][m]:.2e} | {rmse['causal'][m]:.2e} |" for m in rmse["non-causal"]]
    return "\n".join(lines) + "\n"


def ablation() -> list[dict]:
    """FA3 Table 2's shape (batch 4, seqlen 8448, 16 heads, d128, non-causal) and fp8 tiles at seqlen 8k."""
    import torch
    from flashsim.algorithms.tiling import Tiling
    from flashsim.kernels import hopper, hopper_fp8

    rows = []
    b, h, n, d = 4, 16, 8448, 128
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    flops = _flops(b, h, n, d, False)
    variants = [
        ("ping-pong + intra-warpgroup overlap", (128, 176), "pingpong"),
        ("intra-warpgroup overlap only", (128, 176), "overlap"),
        ("no overlap, no ping-pong", (128, 176), "serial"),
        ("ping-pong + overlap, 128x128 tile", (128, 128), "pingpong"),
    ]
    for label, tile, schedule in variants:
        for persistent in (True, False):
            t = Tiling(*tile, 12)
            ms = _time_ms(
                lambda t=t, sch=schedule, p=persistent: hopper.attention(
                    q, k, v, tiling=t, schedule=sch, out=out, persistent=p
                )
            )
            rows.append(
                {
                    "what": f"v3 bf16 {label}",
                    "grid": "persistent" if persistent else "per tile",
                    "ms": round(ms, 4),
                    "TFLOP/s": round(flops / ms / 1e9, 1),
                }
            )
    for d, tile in ((128, (128, 224)), (128, (128, 192)), (128, (128, 128)), (64, (192, 160))):
        n = 8192
        b, h = TOKENS // n, 2048 // d
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        out = torch.empty_like(q)
        qq, kq, vt, *scales = hopper_fp8.prepare(q, k, v, *tile)
        t = hopper_fp8._Tile(*tile)
        ms = _time_ms(
            lambda t=t, qq=qq, kq=kq, vt=vt, sc=scales, o=out: hopper.run(
                "v3-fp8", qq, kq, vt, False, t, "pingpong", o, sc
            )
        )
        fl = _flops(b, h, n, d, False)
        rows.append(
            {
                "what": f"v3-fp8 d{d} {tile[0]}x{tile[1]} seqlen {n}",
                "grid": "persistent",
                "ms": round(ms, 4),
                "TFLOP/s": round(fl / ms / 1e9, 1),
            }
        )
    return rows


def cmd_extras(args) -> int:
    meta = provenance(sys.argv[1:])
    abl = ablation()
    rmse = {"non-causal": fp8_rmse_table(), "causal": fp8_rmse_table(causal=True)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "hopper-extras.json").write_text(
        json.dumps({"provenance": meta, "ablation": abl, "fp8_rmse": rmse}, indent=1) + "\n"
    )
    lines = [
        "# FA3 kernels on H200: schedule ablation, fp8 tiles, fp8 accuracy",
        "",
        "Provenance: " + "; ".join(f"{k} {v}" for k, v in meta.items()),
        "",
        "## Ablation (FA3 Table 2 shape: batch 4, seqlen 8448, 16 heads, d128, non-causal) and fp8 tiles",
        "",
        "| variant | grid | ms | TFLOP/s |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['what']} | {r['grid']} | {r['ms']} | {r['TFLOP/s']} |" for r in abl]
    md = "\n".join(lines) + "\n" + _rmse_markdown(rmse)
    (out / "hopper-extras.md").write_text(md)
    print(md)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench_hopper", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--out", default="experiments/results/h200")
    b.add_argument("--quick", action="store_true", help="seqlens 1k, 4k, 16k only")
    b.add_argument("--grid", choices=sorted(GRID), default="auto", help="plain: one thread block per tile")
    b.add_argument("--headdims", nargs="+", type=int, default=list(HEADDIMS), metavar="D")
    b.add_argument("--seqlens", nargs="+", type=int, default=None, metavar="N", help="overrides --quick")
    b.add_argument("--alt-tile", action="store_true", help="also time the table's other v3 tile (JSON only)")
    b.add_argument("--name", default="hopper-bench", help="output files NAME.json and NAME.md")
    b.set_defaults(func=cmd_bench)
    f = sub.add_parser("fp8", help="v3-fp8 end to end (pre-pass separately) vs v3 bf16, seqlen 1k..16k")
    f.add_argument("--out", default="experiments/results/h200")
    f.add_argument("--causal", action="store_true", help="causal rows too")
    f.add_argument("--headdims", nargs="+", type=int, default=[128, 256, 64], metavar="D")
    f.add_argument("--seqlens", nargs="+", type=int, default=list(SEQLENS[1:]), metavar="N")
    f.set_defaults(func=cmd_fp8)
    o = sub.add_parser("order", help="v3's causal tile orders and grids vs cuDNN (GPU busy time)")
    o.add_argument("--out", default="experiments/results/h200")
    o.add_argument("--headdims", nargs="+", type=int, default=[64, 128], metavar="D")
    o.add_argument("--seqlens", nargs="+", type=int, default=list(SEQLENS), metavar="N")
    o.set_defaults(func=cmd_order)
    vs = sub.add_parser("versus", help="v3 as called by default vs cuDNN, causal and not (GPU busy time)")
    vs.add_argument("--out", default="experiments/results/h200")
    vs.add_argument("--headdims", nargs="+", type=int, default=[64, 128], metavar="D")
    vs.add_argument("--seqlens", nargs="+", type=int, default=list(SEQLENS), metavar="N")
    vs.set_defaults(func=cmd_versus)
    ck = sub.add_parser("causal1k", help="v3's grids and Q buffering on short problems vs cuDNN (GPU busy time)")
    ck.add_argument("--out", default="experiments/results/h200")
    ck.add_argument("--headdims", nargs="+", type=int, default=[64, 128], metavar="D")
    ck.add_argument("--calls", type=int, default=5, help="profiled calls per variant (the median is kept)")
    ck.add_argument("--budget", type=float, default=240.0, help="seconds; later shapes are left out after it")
    ck.add_argument("--skip-buffered", action="store_true", help="only the plain ping-pong kernels")
    ck.set_defaults(func=cmd_causal1k)
    c = sub.add_parser("prepass", help="the fused pre-pass alone per cluster size")
    c.set_defaults(func=cmd_prepass)
    e = sub.add_parser("extras", help="schedule ablation, fp8 tiles and the fp8 RMSE table")
    e.add_argument("--out", default="experiments/results/h200")
    e.set_defaults(func=cmd_extras)
    s = sub.add_parser("smoke")
    s.add_argument("--small", action="store_true", help="two shapes only (for the sanitizers)")
    s.set_defaults(func=cmd_smoke)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
