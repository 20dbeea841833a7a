"""Our decode kernel at a few fixed shapes over chosen split counts: how its K/V bandwidth depends on how many
thread blocks each SM holds, and what a launch of one or two tiny blocks costs (development data for the decode
model; the decode test set is not touched).

Two blocks of the kernel fit an SM (kernels/decode.py). With 132 SMs, 33 splits of 4 K/V heads give one block
per SM, 66 give two, 56 leave 40 SMs with one and 92 with two. Every time is GPU busy time with an L2 flush
before each call (validate.gpu_work's profiler), per kernel (the split kernel and the combine), median of 5.
Rows carry bench_decode's fields, so `decode_dev_compare --bench` predicts them.

    python3 -m flashsim.experiments.bench_decode_splits [--out DIR]
writes DIR/decode-splits.json and DIR/decode-splits.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

HEADS = 32
# (batch, group, seqlen_k, headdim, split counts)
SWEEPS = (
    (1, 8, 131072, 128, (33, 40, 50, 56, 60, 66, 99, 128)),  # the kernel takes at most 128 splits
    (8, 8, 65536, 128, (4, 7, 8, 12, 16)),
    (1, 1, 65536, 128, (4, 7, 8, 16)),
    (1, 8, 131072, 64, (33, 56, 66, 128)),
    (1, 8, 64, 128, (1, 2)),  # one or two blocks of one K/V block each: the fixed costs of the launches
    (1, 8, 1024, 128, (1, 2, 8)),
)


def kernel_times(fn, flush, calls: int = 5) -> list[dict[str, float]]:
    """Per call, each kernel's GPU busy microseconds by name (the flush kernel separates the calls)."""
    from .validate import gpu_calls

    fn()
    per_call: list[dict[str, float]] = []
    for work in gpu_calls(fn, flush, calls):
        times: dict[str, float] = {}
        for e in work:
            name = e.name.split("(")[0].strip()
            times[name] = times.get(name, 0.0) + e.time_range.elapsed_us()
        per_call.append(times)
    return [c for c in per_call if c]


def measure(batch: int, group: int, nk: int, d: int, splits: int, flush) -> dict:
    import torch
    from flashsim.kernels import decode

    g = torch.Generator(device="cuda").manual_seed(0)
    hkv = HEADS // group
    q = torch.randn(batch, HEADS, 1, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(batch, hkv, nk, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    calls = kernel_times(lambda: decode(q, k, v, splits=splits), flush)
    names = sorted(calls[0])
    per_kernel = {n: statistics.median(c.get(n, 0.0) for c in calls) for n in names}
    total = statistics.median(sum(c.values()) for c in calls)
    kv_bytes = 2 * batch * hkv * nk * d * 2
    return {"case": f"b{batch}-g{group}-nk{nk}-d{d}-nq1-s{splits}", "batch": batch, "group": group, "seqlen_k": nk,
            "headdim": d, "seqlen_q": 1, "kv_heads": hkv, "impl": "ours", "page_size": 0, "splits": splits,
            "blocks": batch * hkv * splits, "kv_bytes": kv_bytes, "gpu_us": total, "kernel_us": per_kernel,
            "kv_tb_s": kv_bytes / total / 1e6}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="experiments/results/h200")
    args = ap.parse_args(argv)
    import cupy as cp
    import torch

    from .calibrate_gpu import read_gpu
    from .torch_provenance import torch_gpu_provenance
    from .validate import make_flush

    flush = make_flush(cp, read_gpu(cp))
    rows = []
    for batch, group, nk, d, split_counts in SWEEPS:
        for splits in split_counts:
            row = measure(batch, group, nk, d, splits, flush)
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("case", "blocks", "gpu_us", "kernel_us", "kv_tb_s")}), flush=True)
            torch.cuda.empty_cache()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = torch_gpu_provenance("python3 -m flashsim.experiments.bench_decode_splits")
    (out / "decode-splits.json").write_text(json.dumps({"provenance": meta, "rows": rows}, indent=1) + "\n")
    lines = ["| case | blocks | GPU us | per kernel us | K/V TB/s |", "|---|---|---|---|---|"]
    for r in rows:
        kernels = ", ".join(f"{n.rsplit('_', 1)[-1]} {t:.1f}" for n, t in r["kernel_us"].items())
        lines.append(f"| {r['case']} | {r['blocks']} | {r['gpu_us']:.1f} | {kernels} | {r['kv_tb_s']:.2f} |")
    (out / "decode-splits.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'decode-splits.json'} and {out / 'decode-splits.md'}")


if __name__ == "__main__":
    main()
