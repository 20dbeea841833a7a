"""algorithms.attention: run a schedule numerically on torch tensors (the proof that it is attention)."""

from __future__ import annotations

import torch
from flashsim.errors import FlashsimError

from . import catalog
from .numeric import run_numeric
from .problem import Problem
from .tiling import Tiling, resolve_tiling

_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def problem_of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, algo: str,
               causal_align: str = "bottom-right") -> Problem:
    """The Problem that tensors in SDPA layout [B, H, N, D] describe."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise FlashsimError("q, k and v must be 4-D tensors [batch, heads, seqlen, headdim]")
    if k.shape != v.shape:
        raise FlashsimError(f"k and v shapes differ: {tuple(k.shape)} vs {tuple(v.shape)}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise FlashsimError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or headdim")
    if q.dtype not in _DTYPES:
        raise FlashsimError(f"unsupported dtype {q.dtype}; use float32, float16 or bfloat16")
    rec = catalog.get(algo)
    dtype = _DTYPES[q.dtype]
    if dtype not in rec.dtypes:
        if len(rec.dtypes) > 1:
            raise FlashsimError(f"{algo} takes {', '.join(rec.dtypes)} inputs, not {dtype}")
        dtype = rec.default_dtype  # a schedule that quantises its inputs itself (v3-fp8: to e4m3)
    b, h, n, d = q.shape
    return Problem(b, h, n, d, seqlen_k=k.shape[2], kv_heads=k.shape[1], causal=causal, dtype=dtype,
                   causal_align=causal_align)


def attention(q, k, v, algo: str = "v2", causal: bool = False, tiling: Tiling | None = None, profile=None,
              hadamard: bool = True, causal_align: str = "bottom-right"):
    """Attention computed by running `algo`'s schedule tile by tile; returns O with q's shape and dtype.

    K and V may have fewer heads than Q (GQA/MQA). profile picks default tiles (default: H100).
    For v3-fp8, the inputs are quantised to e4m3 per block inside the schedule (hadamard: incoherent
    processing of Q and K first). causal_align: which keys a causal row sees when the lengths differ
    ("bottom-right", FlashAttention's; "top-left", PyTorch SDPA's is_causal)."""
    p = problem_of(q, k, v, causal, algo, causal_align)
    if profile is None:
        from flashsim.hw_profiles import load_profile

        profile = load_profile("h100")
    t = tiling if tiling is not None else resolve_tiling(algo, p, profile)
    schedule = catalog.get(algo).schedule(p, t, hadamard=hadamard)
    inputs = {"Q": q.detach().float().cpu(), "K": k.detach().float().cpu(), "V": v.detach().float().cpu()}
    out = run_numeric(schedule, inputs)["O"]
    return out.to(dtype=q.dtype, device=q.device)


def attention_backward(q, k, v, do, algo: str = "v2", causal: bool = False, tiling: Tiling | None = None,
                       profile=None, causal_align: str = "bottom-right", dq: str = "atomic"):
    """The gradients (dQ, dK, dV) of attention, computed by running `algo`'s forward schedule (for what it
    saves: O and the logsumexp, or P for standard) and then its backward schedule, tile by tile. `algo` is a
    forward schedule with a backward (algorithms/backward.py); tiling: the backward's tiles (default: the
    public kernels'). dq: 'atomic' or 'pass' (v2-bwd's dQ accumulation)."""
    from .backward import pass_algos

    fwd, bwd = pass_algos(algo, "fwd+bwd")
    p = problem_of(q, k, v, causal, fwd, causal_align)
    if profile is None:
        from flashsim.hw_profiles import load_profile

        profile = load_profile("h100")
    inputs = {"Q": q.detach().float().cpu(), "K": k.detach().float().cpu(), "V": v.detach().float().cpu()}
    saved = run_numeric(catalog.get(fwd).schedule(p, resolve_tiling(fwd, p, profile)), inputs)
    t = tiling if tiling is not None else resolve_tiling(bwd, p, profile)
    grads = run_numeric(catalog.get(bwd).schedule(p, t, dq=dq), {**saved, "dO": do.detach().float().cpu()})
    return tuple(grads[name].to(dtype=x.dtype, device=x.device) for name, x in (("dQ", q), ("dK", k), ("dV", v)))
