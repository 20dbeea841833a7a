"""FlashAttention-2's backward: our v2-bwd kernels against SDPA's flash (FA2) and cuDNN backward, on the FA2
paper's grid (batch x seqlen = 16k, hidden 2048 as d64 x 32 heads or d128 x 16 heads, causal off and on).

    python3 -m flashsim.experiments.bench_backward --out DIR [--seqlens 512,1024,...] [--dtype bf16]

First a correctness check, which stops the run (exit status 1) on a mismatch: on small shapes (odd lengths,
Nq != Nk, GQA) our gradients against fp64 autograd (FlashAttention's test criterion, as
tests/test_backward_gpu.py), and on every grid point our gradients against SDPA flash's. Then each backward
is timed alone: the forward runs once outside the timed call (ours: attention(..., return_lse=True); SDPA:
its forward with requires_grad, then torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)), the L2
is flushed (256 MiB written) before every call, and the time is the GPU busy time of the call's kernels
(torch.profiler, median of 3) with CUDA-event time alongside. TFLOP/s use the papers' convention: backward
FLOPs = 2.5 x forward FLOPs, forward = 4 B H Nq Nk d (halved when causal).

Writes DIR/backward.jsonl (one record per measurement), DIR/backward.json (all of them plus the device) and
DIR/backward.md (a table, ours / SDPA flash per point).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from .validate import gpu_work, make_flush, time_call

IMPLS = ("ours", "sdpa-flash", "sdpa-cudnn")
GRID_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS, HIDDEN = 16384, 2048
MIN_REPS, MAX_REPS, BUDGET_S = 5, 30, 0.5
SDPA_TOL = 0.05  # relative max error of our gradients against SDPA flash's on a grid point (both bf16/fp16)


def backward_flops(b: int, h: int, nq: int, nk: int, d: int, causal: bool) -> float:
    return 2.5 * 4.0 * b * h * nq * nk * d / (2 if causal else 1)


def explicit_grads(q, k, v, dout, causal, dtype):
    """Autograd of attention with an explicit bottom-right mask, computed in dtype (GQA: K/V heads repeated)."""
    import torch

    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    qq, kk, vv = leaves
    g = qq.shape[1] // kk.shape[1]
    kk, vv = kk.repeat_interleave(g, dim=1), vv.repeat_interleave(g, dim=1)
    s = (qq @ kk.transpose(-1, -2)) * qq.shape[-1] ** -0.5
    empty = None
    if causal:
        nq, nk = s.shape[-2:]
        i = torch.arange(nq, device=s.device)[:, None]
        j = torch.arange(nk, device=s.device)[None, :]
        hidden = j > i + (nk - nq)
        empty = hidden.all(dim=-1, keepdim=True)
        s = s.masked_fill(hidden, float("-inf")).masked_fill(empty, 0.0)
    out = torch.softmax(s, dim=-1) @ vv
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return torch.autograd.grad(out, leaves, dout.to(dtype))


def check_small(dtype, log) -> list[str]:
    """Our gradients against fp64 autograd: error <= 2x PyTorch's at the input dtype + one ulp."""
    import torch
    from flashsim.kernels import attention, attention_backward

    failures = []
    shapes = [(2, 4, 4, 256, 256), (2, 4, 1, 113, 203), (1, 4, 4, 203, 113), (1, 8, 2, 300, 300)]
    for d in (64, 128):
        for causal in (False, True):
            for b, h, hkv, nq, nk in shapes:
                gen = torch.Generator(device="cuda").manual_seed(nq * 7 + nk + d)
                q = torch.randn(b, h, nq, d, device="cuda", dtype=dtype, generator=gen)
                k, v = (torch.randn(b, hkv, nk, d, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
                dout = torch.randn(b, h, nq, d, device="cuda", dtype=dtype, generator=gen)
                out, lse = attention(q, k, v, causal=causal, return_lse=True)
                ours = attention_backward(q, k, v, out, lse, dout, causal=causal)
                exact = explicit_grads(q, k, v, dout, causal, torch.float64)
                low = explicit_grads(q, k, v, dout, causal, dtype)
                for name, a, ref, lp in zip(("dq", "dk", "dv"), ours, exact, low, strict=True):
                    err = (a.double() - ref).abs().max().item()
                    bound = 2 * (lp.double() - ref).abs().max().item() + torch.finfo(dtype).eps * ref.abs().max().item()
                    if not err <= bound:
                        failures.append(f"d{d} causal={causal} {(b, h, hkv, nq, nk)} {name}: {err:.3g} > {bound:.3g}")
    log(f"small-shape check against fp64 autograd: {'FAIL' if failures else 'ok'}")
    return failures


def sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend

    return {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}[name]


def make_backward(impl: str, q, k, v, dout, causal: bool):
    """The timed call of impl (forward already done) and the gradients it returns."""
    import torch
    from flashsim.kernels import attention, attention_backward

    if impl == "ours":
        out, lse = attention(q, k, v, causal=causal, return_lse=True)
        return lambda: attention_backward(q, k, v, out, lse, dout, causal=causal)
    from torch.nn.attention import sdpa_kernel

    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(sdpa_backend(impl)):
        out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)

    def call():
        with sdpa_kernel(sdpa_backend(impl)):
            return torch.autograd.grad(out, leaves, dout, retain_graph=True)

    return call


def rel_max_err(a, ref) -> float:
    return ((a.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30)).item()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/backward")
    parser.add_argument("--seqlens", default=",".join(map(str, GRID_SEQLENS)))
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    args = parser.parse_args(argv)
    import cupy as cp
    import torch

    from .calibrate_gpu import read_gpu

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_file = (out_dir / "backward.log").open("w")

    def log(msg: str) -> None:
        print(msg, flush=True)
        log_file.write(msg + "\n")
        log_file.flush()

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    gpu = read_gpu(cp)
    log(f"device: {gpu.name}, torch {torch.__version__}")
    failures = check_small(dtype, log)
    if failures:
        for f in failures:
            log(f"MISMATCH {f}")
        return 1

    flush = make_flush(cp, gpu)
    records = []
    jsonl = (out_dir / "backward.jsonl").open("w")
    for d in (64, 128):
        heads = HIDDEN // d
        for causal in (False, True):
            for n in map(int, args.seqlens.split(",")):
                b = max(1, TOKENS // n)
                gen = torch.Generator(device="cuda").manual_seed(n + d)
                q, k, v, dout = (torch.randn(b, heads, n, d, device="cuda", dtype=dtype, generator=gen)
                                 for _ in range(4))  # fmt: skip
                flops = backward_flops(b, heads, n, n, d, causal)
                ref = None
                for impl in IMPLS:
                    rec = {"impl": impl, "batch": b, "heads": heads, "seqlen": n, "headdim": d, "causal": causal,
                           "dtype": args.dtype, "flops": flops, "flops_convention": "backward = 2.5 x forward"}
                    try:
                        fn = make_backward(impl, q, k, v, dout, causal)
                        grads = fn()
                        torch.cuda.synchronize()
                        if impl == "sdpa-flash":
                            ref = grads
                        elif impl == "ours":
                            ours_grads = grads
                        samples = time_call(fn, flush, MIN_REPS, MAX_REPS, BUDGET_S)
                        busy, names = gpu_work(fn, flush)
                        rec.update(status="ok", event_time_s=statistics.median(samples),
                                   kernel_time_s=statistics.median(busy) if busy else None, kernels=names)
                        t = rec["kernel_time_s"] or rec["event_time_s"]
                        rec["tflops"] = flops / t / 1e12
                        del grads
                    except Exception as exc:  # a backend that refuses the shape is a result, not the end
                        rec.update(status="failed", error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
                    records.append(rec)
                    jsonl.write(json.dumps(rec) + "\n")
                    jsonl.flush()
                if ref is not None:
                    errs = [rel_max_err(a, r) for a, r in zip(ours_grads, ref, strict=True)]
                    records[-3]["rel_err_vs_sdpa_flash"] = errs
                    if max(errs) > SDPA_TOL:
                        log(f"MISMATCH d{d} causal={causal} n={n}: relative error vs SDPA flash {errs}")
                        return 1
                del ours_grads
                summary = "  ".join(f"{r['impl']} {r.get('tflops', 0):.0f}" for r in records[-3:])
                log(f"d{d} causal={int(causal)} n={n} b={b}: TFLOP/s {summary}")

    (out_dir / "backward.json").write_text(json.dumps({"device": gpu.name, "torch": torch.__version__,
                                                       "records": records}, indent=1))  # fmt: skip
    (out_dir / "backward.md").write_text(markdown(records, gpu.name, torch.__version__))
    log((out_dir / "backward.md").read_text())
    return 0


def markdown(records: list[dict], device: str, torch_version: str) -> str:
    rows = {}
    for r in records:
        rows.setdefault((r["headdim"], r["causal"], r["seqlen"]), {})[r["impl"]] = r
    lines = [
        f"Backward TFLOP/s on {device} (torch {torch_version}); FLOPs = 2.5 x forward (4 B H N^2 d, /2 causal); "
        "GPU busy time of the backward's kernels, L2 flushed before each call.",
        "",
        "| d | causal | seqlen | ours | SDPA flash | cuDNN | ours / flash |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (d, causal, n), by in sorted(rows.items()):
        tf = {i: by.get(i, {}).get("tflops") for i in IMPLS}
        cells = [f"{tf[i]:.0f}" if tf[i] else "-" for i in IMPLS]
        ratio = f"{tf['ours'] / tf['sdpa-flash']:.2f}" if tf["ours"] and tf["sdpa-flash"] else "-"
        lines.append(f"| {d} | {int(causal)} | {n} | {' | '.join(cells)} | {ratio} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
