"""Each kernel of the backward timed alone: where short and causal backward problems spend their time.

    python3 -m flashsim.experiments.bwd_kernel_times --out DIR

Two sets (wave first), bf16, L2 flushed before every call as experiments/bench_backward.py does, durations
read by the CUDA profiler (median of 3 calls; each kernel's own duration and its start after the call's first):

- grid: the development grid (FA2's: batch x seqlen = 16k, hidden 2048 as d64 x 32 heads or d128 x 16) for
  our v2 backward, and SDPA's flash backward at N 512, 2k and 16k; what the preprocess (D = rowsum(dO O),
  dQaccum zeroed), the main kernel and the dQ conversion each take (and SDPA's own copies around them).
- wave: our kernel on one exact wave, 132 blocks of 128 keys (N = 128 s, H = 132 / s, B = 1, s key blocks per
  head, so s Q steps per block at d64 and 2 s at d128), causal and not: the main kernel's time against s
  separates what a block pays once (K/V in, dK/dV out, the last dQ reductions, launch and drain) from what each
  step costs at full load.

Writes DIR/bwd-kernel-times.json and .jsonl (one record per timed call set).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from .bench_backward import GRID_SEQLENS, HIDDEN, TOKENS, make_backward
from .validate import gpu_calls, make_flush

WAVE_STEPS = (1, 2, 3, 4, 6, 12)
WAVE_BLOCKS = 132
SDPA_SEQLENS = (512, 2048, 16384)  # SDPA flash's kernels, and what it adds around them, at a few lengths


def kernel_rows(fn, flush, calls: int = 3) -> list[dict]:
    """Per kernel of one call: name, median duration (us) and median start after the call's first kernel."""
    work = [w for w in gpu_calls(fn, flush, calls) if w]  # the flush kernel separates the calls
    if not work:
        raise RuntimeError("the profiler saw no kernels of the call")
    work = [w for w in work if len(w) == len(work[0])]
    rows = []
    for n, e in enumerate(work[0]):
        durs = [w[n].time_range.elapsed_us() for w in work]
        starts = [w[n].time_range.start - w[0].time_range.start for w in work]
        rows.append({"name": e.name[:160], "us": statistics.median(durs), "start_us": statistics.median(starts)})
    return rows


def measure(impl, b, h, n, d, causal, flush, dtype) -> dict:
    import torch

    gen = torch.Generator(device="cuda").manual_seed(n + d)
    q, k, v, dout = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=gen) for _ in range(4))
    fn = make_backward(impl, q, k, v, dout, causal)
    fn()
    torch.cuda.synchronize()
    kernels = kernel_rows(fn, flush)
    return {"impl": impl, "batch": b, "heads": h, "seqlen": n, "headdim": d, "causal": causal,
            "busy_us": sum(r["us"] for r in kernels), "kernels": kernels}


def profiling_setup(out: str) -> tuple[Path, object, object]:
    """(the output directory, made; the GPU as calibrate_gpu reads it; the L2 flush validate runs before every
    call) for a script that times each kernel of a call."""
    import cupy as cp

    from .calibrate_gpu import read_gpu

    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    gpu = read_gpu(cp)
    return path, gpu, make_flush(cp, gpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/bwd-kernel-times")
    parser.add_argument("--sets", default="grid,wave")
    args = parser.parse_args(argv)
    import torch

    out, gpu, flush = profiling_setup(args.out)
    records = []
    jsonl = (out / "bwd-kernel-times.jsonl").open("w")

    def keep(rec: dict, kind: str) -> None:
        rec["set"] = kind
        records.append(rec)
        jsonl.write(json.dumps(rec) + "\n")
        jsonl.flush()
        cells = "  ".join(f"{r['name'].split('(')[0].split('<')[0][-28:]} {r['us']:.1f}" for r in rec["kernels"])
        print(f"{kind} {rec['impl']} d{rec['headdim']} c{int(rec['causal'])} n{rec['seqlen']} b{rec['batch']} "
              f"h{rec['heads']}: {rec['busy_us']:.1f} us = {cells}", flush=True)

    sets = args.sets.split(",")
    if "wave" in sets:
        for d in (64, 128):
            for causal in (False, True):
                for s in WAVE_STEPS:
                    keep(measure("ours", 1, WAVE_BLOCKS // s, 128 * s, d, causal, flush, torch.bfloat16), "wave")
    if "grid" in sets:
        for d in (64, 128):
            for causal in (False, True):
                for n in GRID_SEQLENS:
                    b, h = max(1, TOKENS // n), HIDDEN // d
                    for impl in ("ours", "sdpa-flash") if n in SDPA_SEQLENS else ("ours",):
                        keep(measure(impl, b, h, n, d, causal, flush, torch.bfloat16), "grid")
    (out / "bwd-kernel-times.json").write_text(json.dumps({"device": gpu.name, "torch": torch.__version__,
                                                           "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
