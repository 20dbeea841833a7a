"""Each kernel of our v3-fp8 call timed alone on the development grid: the quantisation pre-pass against the
attention kernel, with our bf16 v3 beside it.

    python3 -m flashsim.experiments.fp8_kernel_times --out DIR

The FA2 grid and the ragged shapes (validate's development set), bf16 inputs, L2 flushed before every call as
validate does, durations read by the CUDA profiler (median of 3 calls; each kernel's own duration and its start
after the call's first). Our v3-fp8 is predicted fast on the grid's short rows (validation.md); this says
whether the time the model lacks is the pre-pass's or the attention kernel's.

Writes DIR/fp8-kernel-times.json and .jsonl (one record per timed call).
"""

from __future__ import annotations

import argparse
import json
import sys

from .bwd_kernel_times import kernel_rows, profiling_setup
from .validate import fa2_grid, ragged

IMPLS = ("v3-fp8", "v3")


def measure(impl: str, cfg, flush) -> dict:
    import torch
    from flashsim import kernels

    gen = torch.Generator(device="cuda").manual_seed(cfg.seqlen_q + cfg.headdim)
    q = torch.randn(cfg.batch, cfg.heads, cfg.seqlen_q, cfg.headdim, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(cfg.batch, cfg.hkv, cfg.nk, cfg.headdim, device="cuda", dtype=torch.bfloat16,
                        generator=gen) for _ in range(2))

    def fn():
        return kernels.attention(q, k, v, algo=impl, causal=cfg.causal)

    fn()
    torch.cuda.synchronize()
    rows = kernel_rows(fn, flush)
    return {"impl": impl, "config_id": cfg.id, "busy_us": sum(r["us"] for r in rows), "kernels": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/fp8-kernel-times")
    parser.add_argument("--impls", default=",".join(IMPLS))
    args = parser.parse_args(argv)
    import torch

    out, gpu, flush = profiling_setup(args.out)
    records = []
    with (out / "fp8-kernel-times.jsonl").open("w") as jsonl:
        for cfg in fa2_grid() + ragged():
            for impl in args.impls.split(","):
                rec = measure(impl, cfg, flush)
                records.append(rec)
                jsonl.write(json.dumps(rec) + "\n")
                jsonl.flush()
                cells = "  ".join(f"{r['name'].split('(')[0][:34]} {r['us']:.1f}" for r in rec["kernels"])
                print(f"{cfg.id} {impl}: {rec['busy_us']:.1f} us = {cells}", flush=True)
    (out / "fp8-kernel-times.json").write_text(json.dumps({"device": gpu.name, "torch": torch.__version__,
                                                           "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
