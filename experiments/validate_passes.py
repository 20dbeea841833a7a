"""The calls validate times on the backward and decode sets, and the references they are checked against.

Backward: the forward runs once when the call is made, outside the timed and profiled calls, so that only the
backward's kernels are timed: torch.autograd.grad over SDPA's saved graph (retain_graph, so it runs again and
again), or our kernels.attention_backward with the output and logsumexp of our v2 forward.

Decode: q (B, H, Nq, D) against a K/V cache. SDPA has no paged cache, so its backends read the dense
(B, Hkv, Nk, D) cache whatever the configuration's page size; our kernels.decode reads the paged cache the
configuration names: (num_pages, page_size, Hkv, D) pages in shuffled order, found through an int32
(B, pages per sequence) block table. A causal decode aligns bottom-right (the new tokens are the last ones);
SDPA gets it as an explicit lower-right bias, which a backend without masks refuses.

Our decode and backward kernels are optional here: where kernels.decode or kernels.attention_backward does not
exist, the call is refused with that reason and recorded as skipped.
"""

from __future__ import annotations

from collections.abc import Callable

from flashsim.errors import FlashsimError

from . import validate_support as support
from .validate_impls import BACKWARD_KERNELS, BACKWARD_PASS

GRAD_SEED = 1  # dO: drawn apart from q, k, v (seed 0) and the same for every implementation and the reference
PAGE_SEED = 2  # the order of the cache's pages


def our_function(name: str) -> Callable:
    """kernels.<name>, or a refusal saying that this checkout has no such kernel yet."""
    try:
        from flashsim import kernels
    except ImportError as exc:
        raise FlashsimError(f"our kernels cannot be imported here ({exc})") from None
    fn = getattr(kernels, name, None)
    if fn is None:
        raise FlashsimError(f"kernels.{name} does not exist in this checkout: no kernel of ours to time yet")
    return fn


def make_call(impl, q, k, v, cfg) -> Callable[[], object]:
    if cfg.pass_name == BACKWARD_PASS:
        return _backward_call(impl, q, k, v, cfg)
    if cfg.is_decode:
        return _decode_call(impl, q, k, v, cfg)
    raise FlashsimError(f"no {cfg.pass_name} call here; the forward's is validate_impls.make_call")


def grad_output(q):
    """dO, N(0,1) entries, drawn from its own seed."""
    import torch

    g = torch.Generator(device=q.device).manual_seed(GRAD_SEED)
    return torch.randn(q.shape, generator=g, device=q.device, dtype=q.dtype)


def _backward_call(impl, q, k, v, cfg) -> Callable[[], object]:
    if impl.kind == "ours":
        if impl.name not in BACKWARD_KERNELS:
            raise FlashsimError(f"our backward kernels are {', '.join(BACKWARD_KERNELS)}; {impl.name} has none")
        backward = our_function("attention_backward")
        dout = grad_output(q)
        out, lse = our_function("attention")(q, k, v, algo=impl.name, causal=cfg.causal, return_lse=True)
        return lambda: backward(q, k, v, out, lse, dout, causal=cfg.causal)
    import torch
    import torch.nn.functional as F

    dout = grad_output(q)
    leaves = tuple(t.detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(*leaves, is_causal=cfg.causal, enable_gqa=cfg.hkv != cfg.heads)
    return lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True)


def _decode_call(impl, q, k, v, cfg) -> Callable[[], object]:
    if impl.kind == "ours":
        if not impl.paged:
            raise FlashsimError(f"on the decode set our kernel is kernels.decode; {impl.name} is not timed here")
        decode = our_function("decode")
        if not cfg.page_size:
            return lambda: decode(q, k, v, causal=cfg.causal)
        k_cache, v_cache, table = paged_cache(k, v, cfg.page_size)
        import torch

        seqlens = torch.full((cfg.batch,), cfg.nk, dtype=torch.int32, device=q.device)
        return lambda: decode(q, k_cache, v_cache, cache_seqlens=seqlens, block_table=table, causal=cfg.causal)
    import torch.nn.functional as F

    gqa = cfg.hkv != cfg.heads
    if support.alignment_matters(cfg):
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(cfg.seqlen_q, cfg.nk)
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=cfg.causal, enable_gqa=gqa)


def paged_cache(k, v, page_size: int, seed: int = PAGE_SEED):
    """The dense (B, Hkv, Nk, D) cache as pages: (B * P, page_size, Hkv, D) each for K and V, P = ceil(Nk /
    page_size) pages per sequence (the last one padded with zeros), stored in a shuffled order, and the int32
    (B, P) block table with sequence b's j-th page at row table[b, j] of the pool."""
    import torch

    b, hkv, nk, d = k.shape
    pages = -(-nk // page_size)
    g = torch.Generator(device=k.device).manual_seed(seed)
    order = torch.randperm(b * pages, generator=g, device=k.device)

    def pool(t):
        padded = t.new_zeros((b, hkv, pages * page_size, d))
        padded[:, :, :nk] = t
        by_page = padded.view(b, hkv, pages, page_size, d).permute(0, 2, 3, 1, 4).reshape(b * pages, page_size, hkv, d)
        out = torch.empty_like(by_page)
        out[order] = by_page
        return out

    return pool(k), pool(v), order.view(b, pages).to(torch.int32)


def reference(q, k, v, cfg, align: str):
    """What a measured call must return: attention's output (support.reference), or for the backward the
    gradients (dQ, dK, dV) of that output against grad_output's dO (None where no reference runs)."""
    if cfg.pass_name != BACKWARD_PASS:
        return support.reference(q, k, v, cfg, align)
    import torch

    leaves = tuple(t.detach().requires_grad_() for t in (q, k, v))
    with torch.enable_grad():
        out = support.reference(*leaves, cfg, align)
        if out is None:
            return None
        try:
            return torch.autograd.grad(out, leaves, grad_output(q))
        except RuntimeError:
            return None  # a backend whose backward refuses the shape: the kernel is timed without the check
