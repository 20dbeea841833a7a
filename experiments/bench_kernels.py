"""Forward TFLOP/s of flashsim's standard / v1 / v2 kernels beside torch SDPA's flash and cuDNN backends.

The FA2 paper's grid: seqlen 512..16k, batch = 16384 / seqlen, hidden 2048 (d64 x 32 heads, d128 x 16
heads), causal off and on, bf16. FLOPs = 4 B H N^2 d (halved for causal; algorithms.problem). Each time is
the median of CUDA-event timings after warm-up; Q, K and V together are at least 192 MB, several times
the 60 MB L2, so inputs are not rotated. Standard attention is skipped where its S buffer would exceed
--max-s-gb.

    python3 -m flashsim.experiments.bench_kernels [--quick] [--out DIR]
writes DIR/kernels-bench.json and DIR/kernels-bench.md (default experiments/results/h200).
    python3 -m flashsim.experiments.bench_kernels --profile-target ALGO,D,N,CAUSAL[,BATCH,HEADS[,KV_HEADS[,NK]]]
runs one config a few times and exits (a target for ncu); batch and heads default to the grid's, K/V heads to
the query heads (fewer: grouped-query attention) and the keys NK to N.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from flashsim.algorithms.problem import Problem
from flashsim.experiments.torch_provenance import torch_gpu_provenance

SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEADDIMS = {64: 32, 128: 16}  # head dim -> heads at hidden 2048
TOKENS = 16384
IMPLS = ("standard", "v1", "v2", "sdpa-flash", "sdpa-cudnn")
SLEEP_CYCLES_PER_MS = 2_000_000  # torch.cuda._sleep spins for cycles; ~2 GHz SM clock (H200 boost 1980 MHz)


def make_fn(impl: str, q, k, v, causal: bool):
    import torch
    from flashsim.kernels import attention
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if impl.startswith("sdpa-"):
        backend = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}[impl]

        def fn():
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                        enable_gqa=k.shape[1] != q.shape[1])

        return fn
    out = torch.empty_like(q)
    return lambda: attention(q, k, v, algo=impl, causal=causal, out=out)


def time_ms(fn, min_total_ms: float = 150.0, max_reps: int = 50) -> tuple[float, list[float]]:
    """Median of per-call CUDA-event times after warm-up; as many calls as fit in about min_total_ms.

    A GPU sleep queued ahead of the timed calls, longer than the host needs to enqueue them all, keeps
    the device from idling between calls, so a call whose Python launch path takes longer than its
    kernel still times as device work alone."""
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    host = time.perf_counter()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    host_ms = (time.perf_counter() - host) * 1e3
    end.synchronize()
    reps = max(5, min(max_reps, math.ceil(min_total_ms / max(start.elapsed_time(end), 1e-3))))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    torch.cuda._sleep(min(int(2 * reps * host_ms * SLEEP_CYCLES_PER_MS), 4 * 10**9))
    for a, b in events:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) for a, b in events]
    return statistics.median(times), times


def inputs(d: int, n: int, dtype, b: int | None = None, h: int | None = None):
    import torch

    b, h = b or TOKENS // n, h or HEADDIMS[d]
    return tuple(torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))


def bench(seqlens, impls, max_s_gb: float) -> list[dict]:
    import torch

    rows = []
    for d in HEADDIMS:
        for causal in (False, True):
            for n in seqlens:
                q, k, v = inputs(d, n, torch.bfloat16)
                b, h = q.shape[:2]
                problem = Problem(batch=b, heads=h, seqlen_q=n, headdim=d, causal=causal)
                for impl in impls:
                    row = {"impl": impl, "headdim": d, "causal": causal, "seqlen": n, "batch": b, "heads": h}
                    s_gb = b * h * n * n * 2 / 1e9
                    if impl == "standard" and s_gb > max_s_gb:
                        row["skipped"] = f"S would take {s_gb:.1f} GB"
                    else:
                        try:
                            ms, times = time_ms(make_fn(impl, q, k, v, causal))
                            row.update(ms=ms, tflops=problem.flops() / ms / 1e9, spread_ms=[min(times), max(times)])
                        except Exception as exc:  # a backend that refuses this shape: record why
                            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    rows.append(row)
                    shown = f"{row['tflops']:.1f} TFLOP/s" if "tflops" in row else row.get("skipped", row.get("error"))
                    print(f"d{d} {'causal' if causal else 'full  '} N={n:5d} {impl:11s} {shown}", flush=True)
                del q, k, v
                torch.cuda.empty_cache()
    return rows


def provenance(argv) -> dict:
    return torch_gpu_provenance(
        " ".join(["python3 -m flashsim.experiments.bench_kernels", *_public(argv)]),
        dtype="bf16",
        timing="median of CUDA-event times per call after 2 warm-up calls, 5-50 calls (~150 ms), "
        "behind a GPU sleep that keeps launches queued ahead of the device",
    )


def _public(argv) -> list[str]:
    """argv with the output directory left out (results name no machine paths)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            out.append(arg)
    return out


def summary(rows) -> dict:
    """v2 / SDPA flash per head dim and causal flag, over seqlen >= 2k (the target is >= 0.85)."""
    by = {(r["impl"], r["headdim"], r["causal"], r["seqlen"]): r.get("tflops") for r in rows}
    out = {}
    for d in HEADDIMS:
        for causal in (False, True):
            ratios = [
                by[("v2", d, causal, n)] / by[("sdpa-flash", d, causal, n)]
                for n in SEQLENS
                if n >= 2048 and by.get(("v2", d, causal, n)) and by.get(("sdpa-flash", d, causal, n))
            ]
            if ratios:
                key = f"d{d}{'-causal' if causal else ''}"
                out[key] = {"v2_over_flash_min": min(ratios), "v2_over_flash_mean": sum(ratios) / len(ratios)}
    return out


def merged(old: dict, new: dict) -> dict:
    """`old` with the rows `new` measured replaced by `new`'s, and a note with the new run's provenance."""
    def key(r):
        return r["impl"], r["headdim"], r["causal"], r["seqlen"]

    fresh = {key(r): r for r in new["results"]}
    p = new["provenance"]
    impls = ", ".join(sorted({r["impl"] for r in new["results"]}))
    note = (f"{impls} rows re-measured {p['date']} (driver {p['driver']}, torch {p['torch']}): `{p['command']}`; "
            "the other rows are from the run above.")
    return {**old, "results": [fresh.get(key(r), r) for r in old["results"]], "notes": [*old.get("notes", []), note]}


def markdown(data) -> str:
    p = data["provenance"]
    lines = [
        "# Forward TFLOP/s: flashsim kernels vs torch SDPA",
        "",
        f"{p['gpu']}, driver {p['driver']}, CUDA {p['cuda']}, torch {p['torch']}, {p['date']}; bf16.",
        f"Command: `{p['command']}`. {p['timing']}.",
        "",
    ]
    rows = data["results"]
    seqlens = sorted({r["seqlen"] for r in rows})
    for d in HEADDIMS:
        for causal in (False, True):
            lines += [f"## d{d}, {'causal' if causal else 'non-causal'}", ""]
            lines.append("| impl | " + " | ".join(f"{n // 1024}k" if n >= 1024 else str(n) for n in seqlens) + " |")
            lines.append("|---" * (len(seqlens) + 1) + "|")
            for impl in IMPLS:
                cells = []
                for n in seqlens:
                    r = next((r for r in rows if (r["impl"], r["headdim"], r["causal"], r["seqlen"]) ==
                              (impl, d, causal, n)), None)  # fmt: skip
                    cells.append(f"{r['tflops']:.0f}" if r and "tflops" in r else "-")
                if any(c != "-" for c in cells):
                    lines.append(f"| {impl} | " + " | ".join(cells) + " |")
            lines.append("")
    lines += [f"- {note}" for note in data.get("notes", [])]
    lines += [""] if data.get("notes") else []
    lines.append("v2 / SDPA flash at seqlen >= 2k: " + ", ".join(
        f"{k} min {v['v2_over_flash_min']:.2f} mean {v['v2_over_flash_mean']:.2f}" for k, v in data["summary"].items()
    ))  # fmt: skip
    return "\n".join(lines) + "\n"


def profile_target(spec: str) -> None:
    import torch

    algo, d, n, causal, *rest = spec.split(",")
    b, h, hkv, nk = ([int(x) if x else None for x in rest] + [None] * 4)[:4]  # "ALGO,D,N,CAUSAL,,": the grid's
    q, k, v = inputs(int(d), int(n), torch.bfloat16, b, h)
    if hkv or nk:  # grouped-query heads and/or a K/V length of their own
        k, v = (torch.randn(q.shape[0], hkv or q.shape[1], nk or int(n), int(d), device="cuda",
                            dtype=torch.bfloat16) for _ in range(2))
    fn = make_fn(algo, q, k, v, causal.lower() in ("1", "true", "causal"))
    for _ in range(3):
        fn()
    torch.cuda.synchronize()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "h200"))
    ap.add_argument("--quick", action="store_true", help="seqlens 1k, 4k, 16k only")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--max-s-gb", type=float, default=20.0, help="skip standard where S needs more")
    ap.add_argument("--profile-target",
                    help="ALGO,D,N,CAUSAL[,BATCH,HEADS[,KV_HEADS[,NK]]]: run one config 3 times (for ncu) and exit")
    ap.add_argument("--update", action="store_true",
                    help="replace only these implementations' rows in the existing results, with a note saying so")
    args = ap.parse_args(argv)
    if args.profile_target:
        profile_target(args.profile_target)
        return 0
    seqlens = (1024, 4096, 16384) if args.quick else SEQLENS
    rows = bench(seqlens, args.impls.split(","), args.max_s_gb)
    data = {"provenance": provenance(argv), "results": rows}
    out = Path(args.out)
    if args.update and (out / "kernels-bench.json").is_file():
        data = merged(json.loads((out / "kernels-bench.json").read_text()), data)
    data["summary"] = summary(data["results"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernels-bench.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "kernels-bench.md").write_text(markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
