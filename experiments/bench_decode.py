"""Decode attention on the GPU: flashsim's decode kernel beside torch SDPA's flash and cuDNN backends, as
achieved K/V bandwidth, and our paged cache beside our dense one.

Every time is GPU busy time (the summed kernel durations of one call, read by the CUDA profiler; median of 3
calls) with a 256 MiB L2 flush before each call (validate.gpu_work / make_flush), so each call reads its K/V
cache from HBM. Achieved bandwidth = K/V bytes (the cache rows the call's sequences hold, each read once) /
time, and its fraction of a copy bandwidth measured in the same run (a 2 GiB device-to-device copy:
read + write bytes / time). SDPA sees a dense cache (F.scaled_dot_product_attention with enable_gqa).

    python3 -m flashsim.experiments.bench_decode [--quick] [--out DIR]
writes DIR/decode-bench.json and DIR/decode-bench.md (default experiments/results/h200).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HEADS = 32  # query heads; kv heads = HEADS / group
MAX_CACHE_BYTES = 36 << 30  # K + V of one configuration
COPY_BYTES = 2 << 30
IMPLS = ("ours", "sdpa-flash", "sdpa-cudnn")
PAGE_SIZES = (16, 64, 256)


@dataclass(frozen=True)
class Case:
    batch: int
    group: int
    seqlen_k: int
    headdim: int = 128
    seqlen_q: int = 1

    @property
    def kv_heads(self) -> int:
        return HEADS // self.group

    @property
    def kv_bytes(self) -> int:
        return 2 * self.batch * self.kv_heads * self.seqlen_k * self.headdim * 2

    @property
    def id(self) -> str:
        return f"b{self.batch}-g{self.group}-nk{self.seqlen_k}-d{self.headdim}-nq{self.seqlen_q}"


def cases(quick: bool) -> list[Case]:
    lengths = (1024, 4096, 16384, 65536, 131072)
    batches = (1, 8, 64)
    groups = (1, 4, 8)
    if quick:
        lengths, batches, groups = (4096, 65536), (1, 8), (8,)
    found = [Case(b, g, n) for n in lengths for b in batches for g in groups]
    found += [Case(b, 8, n, headdim=64) for n in lengths for b in (1, 8)]
    found += [Case(8, 8, n, seqlen_q=nq) for n in (16384, 65536) for nq in (4, 16)]
    return [c for c in found if c.kv_bytes <= MAX_CACHE_BYTES]


def paged_cases(quick: bool) -> list[Case]:
    return [Case(8, 8, n) for n in ((65536,) if quick else (16384, 65536))] + [Case(64, 4, 8192)]


def tensors(case: Case):
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    shape_q = (case.batch, HEADS, case.seqlen_q, case.headdim)
    shape_kv = (case.batch, case.kv_heads, case.seqlen_k, case.headdim)
    q = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16, generator=g)
    return q, k, v


def to_pages(k, page_size: int):
    """A dense (B, Hkv, N, D) cache as a vLLM page pool (pages, page_size, Hkv, D) in a shuffled page order,
    and its int32 block table."""
    import torch

    b, hkv, n, d = k.shape
    per = n // page_size
    order = torch.randperm(b * per, generator=torch.Generator().manual_seed(0)).to(k.device)
    pool = torch.empty(b * per, page_size, hkv, d, dtype=k.dtype, device=k.device)
    pool[order] = k.reshape(b, hkv, per, page_size, d).permute(0, 2, 3, 1, 4).reshape(b * per, page_size, hkv, d)
    return pool, order.reshape(b, per).to(torch.int32)


def call_for(impl: str, case: Case, q, k, v):
    import torch.nn.functional as F
    from flashsim.kernels import decode
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if impl == "ours":
        return lambda: decode(q, k, v)
    backend = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}[impl]

    def run():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=case.group > 1)

    return run


def busy_seconds(fn, flush) -> tuple[float, list[str]]:
    from .validate import gpu_work

    fn()  # warm-up (and the first use's module load)
    busy, names = gpu_work(fn, flush, calls=3)
    if not busy:
        raise RuntimeError("the profiler saw no GPU work")
    return statistics.median(busy), names


def copy_bandwidth(flush) -> float:
    import torch

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    seconds, _ = busy_seconds(lambda: dst.copy_(src), flush)
    return 2 * COPY_BYTES / seconds


def measure(case: Case, impl: str, q, k, v, flush, ref, copy_bw: float, page_size: int = 0) -> dict:
    import torch

    row = {"case": case.id, **asdict(case), "kv_heads": case.kv_heads, "impl": impl, "page_size": page_size,
           "kv_bytes": case.kv_bytes}
    try:
        if page_size:
            from flashsim.kernels import decode

            pk, table = to_pages(k, page_size)
            pv, _ = to_pages(v, page_size)
            lens = torch.full((case.batch,), case.seqlen_k, dtype=torch.int32, device="cuda")
            fn = lambda: decode(q, pk, pv, cache_seqlens=lens, block_table=table)  # noqa: E731
        else:
            fn = call_for(impl, case, q, k, v)
        out = fn()
        seconds, names = busy_seconds(fn, flush)
    except Exception as exc:  # a backend that refuses the shape: recorded, not fatal
        return {**row, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    if impl == "ours":
        from flashsim.kernels.decode_api import decode_splits

        row["splits"] = decode_splits(q, k)
    err = float((out.float() - ref.float()).norm() / ref.float().norm()) if ref is not None else None
    bw = case.kv_bytes / seconds
    return {**row, "gpu_us": seconds * 1e6, "kv_tb_s": bw / 1e12, "pct_copy": 100 * bw / copy_bw,
            "rel_err_vs_ref": err, "kernels": names}


def markdown(rows: list[dict], copy_bw: float) -> str:
    lines = [f"Copy bandwidth (read + write of a 2 GiB copy): {copy_bw / 1e12:.2f} TB/s\n",
             "| case | impl | page | GPU us | K/V TB/s | % copy | rel err |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['impl']} | {r['page_size'] or '-'} | {r['error']} | | | |")
        else:
            err = f"{r['rel_err_vs_ref']:.1e}" if r["rel_err_vs_ref"] is not None else "-"
            lines.append(f"| {r['case']} | {r['impl']} | {r['page_size'] or '-'} | {r['gpu_us']:.1f} | "
                         f"{r['kv_tb_s']:.2f} | {r['pct_copy']:.0f} | {err} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="experiments/results/h200")
    ap.add_argument("--quick", action="store_true", help="a few shapes only")
    ap.add_argument("--minutes", type=float, default=6.0, help="stop starting new shapes after this long")
    args = ap.parse_args(argv)
    import cupy as cp
    import torch

    from .calibrate_gpu import read_gpu
    from .torch_provenance import torch_gpu_provenance
    from .validate import make_flush

    deadline = time.monotonic() + args.minutes * 60
    flush = make_flush(cp, read_gpu(cp))
    copy_bw = copy_bandwidth(flush)
    print(f"copy bandwidth {copy_bw / 1e12:.2f} TB/s", flush=True)
    rows: list[dict] = []
    jobs = [(c, False) for c in cases(args.quick)] + [(c, True) for c in paged_cases(args.quick)]
    for case, paged in jobs:
        if time.monotonic() > deadline:
            print(f"out of time before {case.id}", flush=True)
            break
        q, k, v = tensors(case)
        ref = call_for("sdpa-flash" if case.group == 1 else "sdpa-cudnn", case, q, k, v)
        try:
            ref_out = ref()
        except Exception:
            ref_out = None
        impls = [("ours", p) for p in (0, *PAGE_SIZES)] if paged else [(i, 0) for i in IMPLS]
        for impl, page in impls:
            row = measure(case, impl, q, k, v, flush, ref_out, copy_bw, page)
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("case", "impl", "page_size", "gpu_us", "kv_tb_s",
                                                      "pct_copy", "rel_err_vs_ref", "error")}), flush=True)
        del q, k, v, ref_out
        torch.cuda.empty_cache()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = torch_gpu_provenance("python3 -m flashsim.experiments.bench_decode", copy_tb_s=copy_bw / 1e12)
    (out / "decode-bench.json").write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1))
    (out / "decode-bench.md").write_text(markdown(rows, copy_bw))
    print(f"wrote {out / 'decode-bench.json'} and {out / 'decode-bench.md'}")


if __name__ == "__main__":
    main()
