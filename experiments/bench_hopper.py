"""Forward TFLOP/s of our FA3 kernels (v3 bf16, v3-fp8) beside PyTorch SDPA's cuDNN and flash backends.

The FA2/FA3 papers' grid: seqlen 512..16k, batch = 16384 / seqlen, d64 x 32 heads and d128 x 16 heads,
causal off and on. FLOPs by the papers' convention (4 B H N^2 d, halved for causal). v3-fp8 is timed on
pre-quantised inputs (the kernel alone); its torch quantisation pass is timed separately.

    python -m experiments.bench_hopper bench --out experiments/results/h200
    python -m experiments.bench_hopper smoke          # one small launch per kernel (for compute-sanitizer)
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import subprocess
import sys
from pathlib import Path

SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEADS = {64: 32, 128: 16}
TOKENS = 16384


def _time_ms(fn, warmup: int = 3, iters: int = 10) -> float:
    """Median over `iters` launches of CUDA-event time, after `warmup` launches."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
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

    from kernels import hopper, hopper_fp8

    out = torch.empty_like(q)
    if name == "v3":
        return lambda: hopper.attention(q, k, v, causal=causal, out=out)
    if name == "v3-fp8":
        bm, bn = hopper.choose_tile("v3-fp8", q.shape[-1], causal)
        qq, kq, vt, *scales = hopper_fp8.prepare(q, k, v, bm, bn)
        tile = hopper_fp8._Tile(bm, bn)
        return lambda: hopper.run("v3-fp8", qq, kq, vt, causal, tile, "pingpong", out, scales)
    if name == "v3-fp8 quant":
        bm, bn = hopper.choose_tile("v3-fp8", q.shape[-1], causal)
        return lambda: hopper_fp8.prepare(q, k, v, bm, bn)
    fn = _sdpa(name.removeprefix("sdpa-"))
    return lambda: fn(q, k, v, causal)


def measure(d: int, n: int, causal: bool, methods) -> dict:
    import torch

    b, h = TOKENS // n, HEADS[d]
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flops = _flops(b, h, n, d, causal)
    row = {"d": d, "seqlen": n, "batch": b, "heads": h, "causal": causal}
    for name in methods:
        try:
            ms = _time_ms(_runner(name, q, k, v, causal))
            row[f"{name} ms"] = round(ms, 4)
            if name != "v3-fp8 quant":
                row[f"{name} TFLOP/s"] = round(flops / ms / 1e9, 1)
        except Exception as exc:  # a backend refusing a shape is a result, not a crash
            row[f"{name} error"] = f"{type(exc).__name__}: {exc}"[:200]
    return row


def provenance(argv) -> dict:
    import torch

    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        driver = "unknown"
    return {
        "gpu": torch.cuda.get_device_name(),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "driver": driver,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m experiments.bench_hopper " + " ".join(argv),
        "timing": "CUDA events, median of 10 launches after 3 warm-ups; clocks as found",
    }


def to_markdown(meta: dict, rows: list[dict], methods) -> str:
    lines = [
        "# FA3 forward on H200: our v3 / v3-fp8 kernels vs PyTorch SDPA",
        "",
        "Provenance: " + "; ".join(f"{k} {v}" for k, v in meta.items()),
        "",
        "TFLOP/s (forward, 4 B H N^2 d, halved for causal); batch = 16384 / seqlen.",
        "",
        "| d | causal | seqlen | " + " | ".join(methods[:4]) + " | v3 / cuDNN | fp8 / v3 |",
        "|---|---|---|" + "---|" * 6,
    ]
    for r in rows:
        vals = [str(r.get(f"{m} TFLOP/s", "err")) for m in methods[:4]]
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
    methods = ["v3", "v3-fp8", "sdpa-cudnn", "sdpa-flash", "v3-fp8 quant"]
    seqlens = (1024, 4096, 16384) if args.quick else SEQLENS
    rows = []
    for d in (64, 128):
        for causal in (False, True):
            for n in seqlens:
                row = measure(d, n, causal, methods)
                rows.append(row)
                print(json.dumps(row), flush=True)
    meta = provenance(sys.argv[1:])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "hopper-bench.json").write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1) + "\n")
    md = to_markdown(meta, rows, methods)
    (out / "hopper-bench.md").write_text(md)
    print(md)
    return 0


def cmd_smoke(args) -> int:
    """One small launch of each default kernel; prints the max error against SDPA."""
    import torch

    from kernels import hopper, hopper_fp8

    torch.manual_seed(0)
    worst = 0.0
    cases = ((128, 300, False), (128, 300, True), (64, 200, False), (64, 200, True))
    for d, n, causal in cases[1:3] if args.small else cases:
        q, k, v = (torch.randn(1, 2, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        outs = {"v3": hopper.attention(q, k, v, causal=causal)}
        if d == 128:
            outs["v3-fp8"] = hopper_fp8.attention(q, k, v, causal=causal)
        for name, out in outs.items():
            err = (out.float() - ref).abs().max().item()
            print(f"smoke {name} d{d} N{n} causal={causal}: max err {err:.2e}", flush=True)
            if not math.isfinite(err):
                return 1
            worst = max(worst, err if name == "v3" else 0.0)
    return 0 if worst < 0.05 else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench_hopper", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--out", default="experiments/results/h200")
    b.add_argument("--quick", action="store_true", help="seqlens 1k, 4k, 16k only")
    b.set_defaults(func=cmd_bench)
    s = sub.add_parser("smoke")
    s.add_argument("--small", action="store_true", help="two shapes only (for the sanitizers)")
    s.set_defaults(func=cmd_smoke)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
