"""attention_backward(q, k, v, out, lse, dout): FlashAttention-2's backward with flashsim's v2-bwd kernels,
and flash_attention(q, k, v, causal), an autograd Function over the v2 forward and this backward.

The kernels take contiguous tensors (SDPA's (B, H, N, D) layout); other strides are copied first.
"""

from __future__ import annotations

import contextlib

from flashsim.errors import FlashsimError

from . import api, registry
from .launch import BoundKernels
from .v2_bwd import BwdCall

ALGO = "v2-bwd"


def _check_like(torch, name: str, t, shape: tuple, dtype, device) -> None:
    if not isinstance(t, torch.Tensor):
        raise FlashsimError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != shape or t.dtype != dtype:
        raise FlashsimError(f"{name} must be a {dtype} tensor of shape {shape}, got {t.dtype} {tuple(t.shape)}")
    if t.device != device:
        raise FlashsimError(f"{name} is on {t.device}, q on {device}; every tensor must be on one device")


def attention_backward(q, k, v, out, lse, dout, causal: bool = False, softmax_scale: float | None = None):
    """Gradients (dq, dk, dv) of attention's output with respect to q, k and v.

    q: (B, H, Nq, D); k, v: (B, Hkv, Nk, D) with H a multiple of Hkv; out and dout like q; lse (B, H, Nq)
    fp32, the natural-log logsumexp that attention(..., return_lse=True) returns. float16 or bfloat16 on one
    CUDA device; causal and softmax_scale as the forward was called with (causal: bottom-right aligned).
    With grouped-query attention dk and dv sum the query heads of each group.
    """
    torch = api._torch()
    family = registry.family(ALGO)
    dtype = api._check_tensors(torch, q, k, v)
    b, h, nq, d = q.shape
    if d not in family.headdims:
        raise FlashsimError(f"{ALGO} kernels are built for head dims {', '.join(map(str, family.headdims))}, not {d}")
    _check_like(torch, "out", out, (b, h, nq, d), q.dtype, q.device)
    _check_like(torch, "dout", dout, (b, h, nq, d), q.dtype, q.device)
    _check_like(torch, "lse", lse, (b, h, nq), torch.float32, q.device)
    if not all(t.is_cuda for t in (q, k, v)):
        raise FlashsimError(f"the kernels run on CUDA tensors; got q on {q.device}, k on {k.device}, v on {v.device}")
    if k.device != q.device or v.device != q.device:
        raise FlashsimError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    variant = family.variant(d, dtype, family.default_tiling(d, api._limits(index)))
    arch = family.arch_for(api._capability(index))
    for name, t in (("q", q), ("k", k)):
        if t.shape[1] * t.shape[2] * d >= api._MAX_OFFSET:
            raise FlashsimError(f"{name}'s heads span 2^31 elements or more per batch; the kernels address less")

    q, k, v, out, lse, dout = (t.contiguous() for t in (q, k, v, out, lse, dout))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    scale = float(softmax_scale) if softmax_scale is not None else d**-0.5
    call = BwdCall(q, k, v, out, lse, dout, dq, dk, dv, bool(causal), scale)
    switch = torch.cuda.device(index) if index != torch.cuda.current_device() else contextlib.nullcontext()
    with switch:
        module = api._module(family, arch, index)
        family.run(BoundKernels(module, variant.symbol(family.algo), q.device), variant, call)
    return dq, dk, dv


def _function():
    import torch

    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, softmax_scale):
            out, lse = api.attention(q, k, v, algo="v2", causal=causal, softmax_scale=softmax_scale, return_lse=True)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.causal, ctx.scale = causal, softmax_scale
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = attention_backward(q, k, v, out, lse, dout, ctx.causal, ctx.scale)
            return dq, dk, dv, None, None

    return FlashAttention


_FUNCTION = None


def flash_attention(q, k, v, causal: bool = False, softmax_scale: float | None = None):
    """Differentiable attention: the v2 forward kernel, and the v2-bwd kernels for the gradients."""
    global _FUNCTION
    if _FUNCTION is None:
        _FUNCTION = _function()
    return _FUNCTION.apply(q, k, v, bool(causal), softmax_scale)
