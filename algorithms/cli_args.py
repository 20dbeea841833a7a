"""Command-line arguments that describe a problem and a tiling, shared by every command that takes one."""

from __future__ import annotations

import argparse

from flashsim.errors import FlashsimError

from . import catalog
from .backward import PASSES
from .ir import CAUSAL_ALIGNS, O_STORE_FORMS, PIPELINE_FORMS
from .problem import DTYPE_BYTES, PAGE_SIZES, Problem
from .tiling import Tiling, resolve_tiling


def add_problem_args(
    parser: argparse.ArgumentParser, *, seqlen: int = 4096, batch: int = 4, heads: int = 16, headdim: int = 128
) -> None:
    g = parser.add_argument_group("problem")
    g.add_argument("--batch", "-b", type=int, default=None,
                   help=f"batch size (default {batch}; with --seqlens, their count)")
    parser.set_defaults(batch_default=batch)
    g.add_argument("--heads", type=int, default=heads, help=f"query heads (default {heads})")
    g.add_argument("--kv-heads", type=int, default=0, help="K/V heads for GQA/MQA (default: --heads)")
    g.add_argument("--seqlen", "-n", type=int, default=None,
                   help=f"query sequence length (default {seqlen}; with --seqlens, the longest)")
    parser.set_defaults(seqlen_default=seqlen)
    g.add_argument("--seqlen-kv", type=int, default=0, help="key/value sequence length (default: --seqlen)")
    g.add_argument("--headdim", "-d", type=int, default=headdim, help=f"head dimension (default {headdim})")
    g.add_argument("--causal", action="store_true", help="causal mask (bottom-right aligned unless --causal-align)")
    g.add_argument("--causal-align", choices=CAUSAL_ALIGNS, default="bottom-right",
                   help="with --causal and seqlen != seqlen-kv: bottom-right (FlashAttention, default: the last "
                        "query sees every key) or top-left (PyTorch SDPA's is_causal: query i sees keys 0..i)")
    g.add_argument("--seqlens", type=_lengths, default=(),
                   help="variable-length batch (cu_seqlens packing): K/V length of each sequence, e.g. 512,3000,8000; "
                        "sets the batch, and each sequence has min(--seqlen, its length) queries")
    g.add_argument("--page-size", type=int, default=0, choices=PAGE_SIZES,
                   help="paged K/V cache: tokens per page, found through a block table (default: contiguous)")
    g.add_argument(
        "--dtype", choices=tuple(DTYPE_BYTES), default=None, help="input dtype (default bf16; fp8 with --algo v3-fp8)"
    )


def add_tiling_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("tiling (default: the algorithm's public tiles for the profile)")
    g.add_argument("--block-m", type=int, default=None, help="query rows per tile (Br)")
    g.add_argument("--block-n", type=int, default=None, help="key rows per tile (Bc)")
    g.add_argument("--warps", type=int, default=None, help="warps per thread block")
    g.add_argument("--stages", type=int, default=None, help="K/V shared-memory pipeline stages")
    g.add_argument("--o-store", choices=O_STORE_FORMS, default=None,
                   help="v3, v3-fp8: how the epilogue writes O: tma (FA3's, the default) or fragments (each "
                        "thread's 4-byte stores, as our v3 kernel does, at fragment_store_bytes_per_clk_per_sm)")
    g.add_argument("--pipeline", choices=PIPELINE_FORMS, default=None,
                   help="v3, v3-fp8: how each consumer orders its GEMMs and softmax: overlap (FA3's intra-warpgroup "
                        "pipelining, the default) or serial (cuDNN's Hopper kernel: each GEMM waited for at once, "
                        "the ping-pong turn held through the softmax, K then V loaded, one Q buffer; --stages 1 for "
                        "its one K and one V buffer)")
    add_splits_arg(g)
    g.add_argument("--paper-tiles", action="store_true",
                   help="v1: Algorithm 1's blocks Bc = M/4d, Br = min(Bc, d) instead of the released kernel's")


def add_splits_arg(parser) -> None:
    parser.add_argument(
        "--splits", type=_splits, default=None,
        help="v1: thread blocks per (batch, head) (default: as the released FA1 kernel picks them); v2, v3, "
             "decode: split-KV, thread blocks per Q tile, each a contiguous share of the K/V blocks, merged by a "
             "combine kernel (N or auto: FA2's heuristic; default 1, decode auto)")


# Build options a record may take that are switched off from the command line (on by default), with help.
SWITCHES = {
    "warp_specialization": "v3: no producer warpgroup; the consumers issue their own TMA loads",
    "pingpong": "v3: consumer warpgroups issue their GEMMs whenever ready, without taking turns",
    "intra_overlap": "v3: a warpgroup's softmax overlaps none of its own GEMMs",
}


def _flag(option: str) -> str:
    return "--no-" + option.replace("_", "-")


def add_switch_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("ablation (FA3's techniques, each on by default)")
    for option, text in SWITCHES.items():
        g.add_argument(_flag(option), dest=option, action="store_false", help=text)


def switched_off(args: argparse.Namespace) -> list[str]:
    """The switches the command line turned off."""
    return [o for o in SWITCHES if getattr(args, o, True) is False]


def takes_switches(algo: str, args: argparse.Namespace) -> bool:
    return set(switched_off(args)) <= set(catalog.get(algo).options)


def options_from_args(args: argparse.Namespace, algo: str) -> dict[str, bool]:
    """Build options for `algo` from the switches; refuses a switch the algorithm does not take."""
    off = switched_off(args)
    rec = catalog.get(algo)
    missing = [o for o in off if o not in rec.options]
    if missing:
        takers = [r.name for r in catalog.records() if set(missing) <= set(r.options)]
        raise FlashsimError(f"{algo} has no {' or '.join(_flag(o) for o in missing)}"
                            + (f" (only {', '.join(takers)} do)" if takers else ""))
    return dict.fromkeys(off, False)


def _splits(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or auto, got {text!r}") from None


def _lengths(text: str) -> tuple[int, ...]:
    try:
        lens = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated lengths, got {text!r}") from None
    if not lens or min(lens) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive lengths, got {text!r}")
    return lens


def add_algo_arg(parser: argparse.ArgumentParser, *, default: str | None = "v2") -> None:
    parser.add_argument(
        "--algo",
        "-a",
        choices=catalog.names(),
        default=default,
        required=default is None,
        help=f"schedule to run (default {default})" if default else "schedule to run",
    )


def problem_from_args(args: argparse.Namespace, algo: str | None = None) -> Problem:
    algo = algo or getattr(args, "algo", None)
    dtype = args.dtype or (catalog.get(algo).default_dtype if algo else "bf16")
    seqlens = tuple(getattr(args, "seqlens", ()) or ())
    seqlen = args.seqlen
    if seqlen is None:
        seqlen = max(seqlens) if seqlens else getattr(args, "seqlen_default", 4096)
    batch = args.batch if args.batch is not None else getattr(args, "batch_default", 4)
    if seqlens and args.batch is not None and args.batch != len(seqlens):
        raise FlashsimError(f"--batch {args.batch} disagrees with --seqlens, which gives {len(seqlens)} sequences "
                            "(--seqlens sets the batch: leave --batch out)")
    return Problem(
        len(seqlens) if seqlens else batch,
        args.heads,
        seqlen,
        args.headdim,
        seqlen_k=max(seqlens) if seqlens else args.seqlen_kv,
        seqlens=seqlens,
        page_size=getattr(args, "page_size", 0),
        kv_heads=args.kv_heads,
        causal=args.causal,
        dtype=dtype,
        causal_align=getattr(args, "causal_align", "bottom-right"),
    )


def tiling_from_args(args: argparse.Namespace, algo: str, problem: Problem, profile) -> Tiling:
    """The tiles of the command line's options, once the algorithm takes the problem's dtype (its tiles for a
    dtype it does not take would be refused for their shape, which says nothing of the dtype)."""
    catalog.check_dtype(algo, problem)
    return resolve_tiling(
        algo, problem, profile, block_m=args.block_m, block_n=args.block_n, warps=args.warps, stages=args.stages,
        splits=getattr(args, "splits", None), paper=getattr(args, "paper_tiles", False),
        o_store=getattr(args, "o_store", None), pipeline=getattr(args, "pipeline", None),
    )


def add_pass_arg(parser: argparse.ArgumentParser, choices: tuple[str, ...] = PASSES) -> None:
    parser.add_argument(
        "--pass", dest="pass_", choices=choices, default="fwd",
        help="fwd (default), bwd (the algorithm's backward: standard-bwd, v2-bwd, v3-bwd)"
             + (", or fwd+bwd (both, times summed)" if "fwd+bwd" in choices else ""))


def tiling_overridden(args: argparse.Namespace) -> bool:
    """Whether any tile option was given on the command line."""
    return any(getattr(args, k, None) is not None
               for k in ("block_m", "block_n", "warps", "stages", "splits", "o_store", "pipeline")) \
        or bool(getattr(args, "paper_tiles", False))
