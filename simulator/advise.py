"""`flashsim advise`: rank the algorithms by simulated time on one profile, say why each loses or cannot
run, and which backend PyTorch's SDPA would pick for the same call."""

from __future__ import annotations

import json
import sys
from typing import Any

from flashsim.algorithms import catalog
from flashsim.algorithms.backward import forward_names
from flashsim.algorithms.problem import DTYPE_BYTES, Problem
from flashsim.errors import FlashsimError
from flashsim.hw_profiles.commands import add_profile_args, profile_from_args

from .sdpa import sdpa_backend

FLASH = ("v1", "v2", "v3", "v3-fp8", "decode")
# why an algorithm that runs is slower than the best, beside what bounds it
SLOWER = {
    "standard": "writes S and P (N^2 elements) to HBM and reads them back",
    "v1": "FA1's loop order re-reads and re-writes O, m and l at every K/V block",
    "v2": "mma.sync and cp.async: no TMA, wgmma or warp specialisation",
    "v3": "",
    "v3-fp8": "",
}
TRAIN_NOTE = ("forward only: this ranks the forward pass; `flashsim simulate --pass fwd+bwd` simulates a training "
              "step")
DECODE_NOTE = ("decode: the prefill schedules run one query row per sequence in a full tile; the decode schedule "
               "splits the K/V sequence over the chip and packs a GQA group's query heads into one tile")


def problem_for(algo: str, seqlen: int, headdim: int, dtype: str, causal: bool, decode: bool, batch: int,
                heads: int) -> Problem:
    rec = catalog.get(algo)
    run_dtype = dtype if dtype in rec.dtypes else rec.default_dtype
    if decode:
        return Problem(batch, heads, 1, headdim, seqlen_k=seqlen, causal=causal, dtype=run_dtype)
    return Problem(batch, heads, seqlen, headdim, causal=causal, dtype=run_dtype)


def _quantises(rec, dtype: str) -> bool:
    """Whether the algorithm takes `dtype` inputs only to quantise them to a narrower type of its own (v3-fp8)."""
    return dtype not in rec.dtypes and rec.input_bytes == DTYPE_BYTES[dtype]


def _unavailable(algo: str, dtype: str) -> str | None:
    if dtype == "fp32" and algo in FLASH:
        return "fp32 inputs: FlashAttention's tensor-core kernels take 16-bit (or fp8) inputs"
    rec = catalog.get(algo)
    if dtype not in rec.dtypes and not _quantises(rec, dtype):
        return f"{dtype} inputs run only with " + ", ".join(r.name for r in catalog.records() if dtype in r.dtypes)
    return None


SIDE_KERNEL_SHARE = 0.2  # a launch besides the main one that takes this share of the kernels' time is named


def _side_kernels(kernels: dict[str, float]) -> str:
    """The launches besides the longest that weigh in the call's time (v3-fp8's pre-pass, a split-KV merge)."""
    total = sum(kernels.values())
    if len(kernels) < 2 or not total:
        return ""
    main = max(kernels, key=kernels.get)
    side = [f"its {name} kernel takes {100 * t / total:.0f}% of the time" for name, t in kernels.items()
            if name != main and t >= SIDE_KERNEL_SHARE * total]
    return "; ".join(side)


def _sdpa_time(backend: str, problem: Problem, profile, sms: int, best_s: float) -> dict:
    """SDPA's pick predicted as `simulate --sdpa` does (simulator/sdpa_launch.py): its time, TFLOP/s and its
    time over the best algorithm's; {} where the simulator refuses the call."""
    from flashsim.algorithms.tiling import Tiling

    from .api import simulate
    from .sdpa_launch import sdpa_run, with_call_work

    try:
        algo, run_problem, tiling, launch = sdpa_run(backend, problem, profile)
        result = with_call_work(simulate(algo, run_problem, profile, Tiling(**tiling), sms=sms), problem, launch,
                                profile)
    except FlashsimError:
        return {}
    return {"time_s": result.time_s, "tflops": result.tflops, "vs_best": result.time_s / best_s}


def advise(profile, seqlen: int, headdim: int, dtype: str = "bf16", causal: bool = False, decode: bool = False,
           train: bool = False, batch: int = 4, heads: int = 16, sms: int | None = None) -> dict:
    """Every algorithm's simulated forward time on `profile` (fastest first), with reasons; the best one that
    keeps the input precision is `best`."""
    from .api import DEFAULT_SAMPLE_SMS, simulate

    if dtype not in DTYPE_BYTES:
        raise FlashsimError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_BYTES)}")
    rows = []
    for algo in forward_names():
        row: dict[str, Any] = {"algo": algo, "time_s": None, "tflops": None, "bound_by": None}
        why = _unavailable(algo, dtype)
        if why is None:
            try:
                problem = problem_for(algo, seqlen, headdim, dtype, causal, decode, batch, heads)
                result = simulate(algo, problem, profile, sms=sms or DEFAULT_SAMPLE_SMS)
            except FlashsimError as exc:
                why = str(exc)
            else:
                row.update(time_s=result.time_s, tflops=result.tflops, bound_by=result.bound_by,
                           kernels={k["name"]: k["cycles"] / k["clock_hz"] for k in result.kernels})
        if why is not None:
            row.update(status="unavailable", reason=why)
        elif _quantises(catalog.get(algo), dtype):
            row.update(status="lower precision", reason="quantises Q, K and V to fp8 e4m3 (lower accuracy)")
        else:
            row.update(status="ok", reason="")
        rows.append(row)
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["time_s"])
    if not ok:
        raise FlashsimError("no algorithm runs this case: " + "; ".join(f"{r['algo']}: {r['reason']}" for r in rows))
    best = ok[0]
    for r in rows:
        if r["time_s"] is None:
            continue
        parts = []
        if r is not best:
            parts.append(f"{r['time_s'] / best['time_s']:.2f}x the time of {best['algo']}")
            if SLOWER[r["algo"]]:
                parts.append(SLOWER[r["algo"]])
        side = _side_kernels(r.get("kernels") or {})
        if side:
            parts.append(side)
        if r["bound_by"] == "hbm":
            parts.append("memory-bound (HBM)" + (": decode reads all of K/V for one query row" if decode else ""))
        elif r is not best:
            parts.append(f"bound by {r['bound_by']}")
        if r["reason"]:
            parts.insert(0, r["reason"])
        r["reason"] = "; ".join(parts)
    order = {"ok": 0, "lower precision": 1, "unavailable": 2}
    rows.sort(key=lambda r: (order[r["status"]], r["time_s"] or 0.0))
    notes = [n for n, on in ((TRAIN_NOTE, train), (DECODE_NOTE, decode)) if on]
    sdpa = sdpa_backend(profile.compute_capability, dtype, headdim)
    if sdpa["backend"] in ("flash", "cudnn") and not decode:
        sdpa.update(_sdpa_time(sdpa["backend"], Problem(batch, heads, seqlen, headdim, causal=causal, dtype=dtype),
                               profile, sms or DEFAULT_SAMPLE_SMS, best["time_s"]))
    return {"hw": profile.name, "seqlen": seqlen, "headdim": headdim, "dtype": dtype, "causal": causal,
            "decode": decode, "train": train, "batch": batch, "heads": heads, "best": best["algo"],
            "ranking": rows, "sdpa": sdpa, "notes": notes}


def register_advise(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "advise",
        help="which attention algorithm to use on a GPU for a case, and what PyTorch's SDPA would pick",
        description="Rank standard, v1, v2, v3 and v3-fp8 by simulated forward time, with the reason each "
                    "is slower or unavailable.",
    )
    add_profile_args(p)
    p.add_argument("--seqlen", "-n", type=int, required=True, help="sequence length (decode: of the K/V cache)")
    p.add_argument("--headdim", "-d", type=int, required=True, help="head dimension")
    p.add_argument("--dtype", choices=tuple(DTYPE_BYTES), default="bf16", help="input dtype (default bf16)")
    p.add_argument("--causal", action="store_true", help="causal mask")
    p.add_argument("--decode", action="store_true", help="one new query row per sequence against a K/V cache")
    p.add_argument("--train", action="store_true", help="the case is training (forward and backward)")
    p.add_argument("--batch", "-b", type=int, default=4, help="batch size (default 4)")
    p.add_argument("--heads", type=int, default=16, help="heads (default 16)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.set_defaults(func=_cmd_advise)


def _cmd_advise(args) -> int:
    report = advise(profile_from_args(args), args.seqlen, args.headdim, args.dtype, args.causal, args.decode,
                    args.train, args.batch, args.heads)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    shape = f"{'decode, K/V cache' if report['decode'] else 'seqlen'} {args.seqlen}, d{args.headdim}, {args.dtype}"
    table = Table(title=f"flashsim advise: {shape}{', causal' if args.causal else ''} on {report['hw']}",
                  title_justify="left")
    for col, justify in (("rank", "right"), ("algorithm", "left"), ("time", "right"), ("TFLOP/s", "right"),
                         ("status", "left"), ("why", "left")):
        table.add_column(col, justify=justify)
    for i, r in enumerate(report["ranking"], 1):
        time = f"{r['time_s'] * 1e6:,.1f} us" if r["time_s"] is not None else "-"
        tflops = f"{r['tflops']:.0f}" if r["tflops"] is not None else "-"
        style = "bold green" if r["algo"] == report["best"] else ("dim" if r["status"] == "unavailable" else "")
        table.add_row(str(i), r["algo"], time, tflops, r["status"], r["reason"], style=style)
    console = Console()
    console.print(table)
    console.print(f"use: [bold]{report['best']}[/bold]")
    sdpa = report["sdpa"]
    picked = sdpa["backend"] or "none"
    tried = ", ".join(sdpa["order"])
    predicted = (f", predicted {sdpa['time_s'] * 1e6:,.1f} us, {sdpa['vs_best']:.2f}x the time of {report['best']}"
                 if sdpa.get("time_s") else "")
    console.print(f"PyTorch SDPA would pick: [bold]{picked}[/bold]{predicted} (tries {tried}"
                  + "".join(f"; {k}: {v}" for k, v in sdpa["skipped"].items()) + ")")
    for note in report["notes"]:
        console.print(f"[yellow]note: {note}[/yellow]")
    return 0
