"""decode(q, k_cache, v_cache, ...): the decode kernel (kernels/decode.cu) on a dense or paged K/V cache.

Checks run in the order a caller can fix them: tensors (type, dtype, shape), cache layout and lengths, splits,
device. The split count defaults to FA2's heuristic as the simulator's decode record applies it
(algorithms/schedules/decode.py, auto), so a measured call and its simulation run the same grid.
"""

from __future__ import annotations

from types import SimpleNamespace

from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import decode as schedule
from flashsim.algorithms.splitkv import MAX_SPLITS
from flashsim.algorithms.tiling import Tiling
from flashsim.errors import FlashsimError

from . import registry
from .decode import DecodeCall

PAGE_SIZES = (16, 32, 64, 256)
_DTYPES = {"float16": "fp16", "bfloat16": "bf16"}


def _torch():
    import torch

    return torch


def _check_4d(torch, **tensors) -> None:
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise FlashsimError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise FlashsimError(f"{name} must be 4-D, got shape {tuple(t.shape)}")


def _dtype(q, k, v) -> str:
    dtype = str(q.dtype).removeprefix("torch.")
    if dtype not in _DTYPES:
        raise FlashsimError(f"q has dtype {dtype}; the decode kernel takes float16 or bfloat16")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise FlashsimError(f"q, k_cache and v_cache must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    return _DTYPES[dtype]


def _int32_vector(torch, name: str, t, shape: tuple[int, ...]):
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or tuple(t.shape) != shape:
        got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise FlashsimError(f"{name} must be an int32 tensor of shape {shape}, got {got}")


def _cache_layout(torch, q, k, v, cache_seqlens, block_table):
    """(kv_heads, capacity per sequence, page size or 0) after checking the cache's shapes and lengths."""
    b, h, _, d = q.shape
    if tuple(v.shape) != tuple(k.shape):
        raise FlashsimError(f"k_cache and v_cache must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if block_table is None:
        bk, hkv, nk, dk = k.shape
        if bk != b or dk != d:
            raise FlashsimError(f"q {tuple(q.shape)} and k_cache {tuple(k.shape)} must agree on batch and head dim "
                                "(a dense cache is (batch, kv_heads, seqlen, headdim))")
        page_size, capacity = 0, nk
    else:
        pages, page_size, hkv, dk = k.shape
        if dk != d:
            raise FlashsimError(f"q {tuple(q.shape)} and k_cache {tuple(k.shape)} must agree on head dim "
                                "(a paged cache is (num_pages, page_size, kv_heads, headdim))")
        if page_size not in PAGE_SIZES:
            raise FlashsimError(f"page size {page_size} is not supported; choose one of "
                                f"{', '.join(map(str, PAGE_SIZES))}")
        if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 or block_table.shape[0] != b:
            raise FlashsimError(f"block_table must be an int32 tensor of shape ({b}, max_pages)")
        _int32_vector(torch, "block_table", block_table, (b, block_table.shape[1]))
        if cache_seqlens is None:
            raise FlashsimError("a paged cache needs cache_seqlens (the keys of each sequence)")
        capacity = block_table.shape[1] * page_size
    if min(hkv, capacity) < 1:
        raise FlashsimError(f"empty K/V cache: k_cache {tuple(k.shape)}")
    if h % hkv:
        raise FlashsimError(f"q has {h} heads, not a multiple of the cache's {hkv} (grouped-query attention)")
    if cache_seqlens is not None:
        _int32_vector(torch, "cache_seqlens", cache_seqlens, (b,))
        lo, hi = (int(x) for x in torch.aminmax(cache_seqlens.cpu()))
        if lo < 0 or hi > capacity:
            raise FlashsimError(f"cache_seqlens must lie in [0, {capacity}] (the cache's keys per sequence), "
                                f"got {lo}..{hi}")
        if block_table is not None:
            used = torch.arange(block_table.shape[1]) < ((cache_seqlens.cpu() + page_size - 1) // page_size)[:, None]
            entries = block_table.cpu()[used]
            if entries.numel() and (int(entries.min()) < 0 or int(entries.max()) >= k.shape[0]):
                raise FlashsimError(f"block_table names pages outside the cache's {k.shape[0]} pages")
    return hkv, capacity, page_size


def _check_device(q, *others) -> None:
    tensors = [t for t in (q, *others) if t is not None]
    if not all(t.is_cuda for t in tensors):
        raise FlashsimError(f"the decode kernel runs on CUDA tensors; got {', '.join(str(t.device) for t in tensors)}")
    if any(t.device != q.device for t in tensors):
        raise FlashsimError("q, the caches, cache_seqlens and block_table must be on one device")


def _usable(t) -> bool:
    """Last dimension contiguous, 16-byte aligned base and rows (the kernel copies 16-byte chunks)."""
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(s % 8 == 0 for s in t.stride()[:-1])


def auto_splits(batch: int, heads: int, kv_heads: int, seqlen_q: int, seqlen_k: int, headdim: int,
                sm_count: int) -> int:
    """FA2's split count for this decode on a GPU of sm_count SMs, as the simulator's decode record picks it."""
    p = Problem(batch=batch, heads=heads, seqlen_q=seqlen_q, headdim=headdim, seqlen_k=seqlen_k, kv_heads=kv_heads)
    t = Tiling(schedule.BLOCK_M, 1, 4)
    return schedule.auto(p, t, SimpleNamespace(sm_count=sm_count))


def _check_splits(splits) -> None:
    if splits is None or splits == "auto":
        return
    if isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= MAX_SPLITS:
        raise FlashsimError(f"splits must be None, 'auto' or an integer in 1..{MAX_SPLITS}, got {splits!r}")


def _splits(splits, q, hkv: int, capacity: int, device_index: int) -> int:
    if splits is None or splits == "auto":
        import torch

        sm_count = torch.cuda.get_device_properties(device_index).multi_processor_count
        b, h, nq, d = q.shape
        return auto_splits(b, h, hkv, nq, capacity, d, sm_count)
    return splits


def decode(q, k_cache, v_cache, cache_seqlens=None, block_table=None, causal: bool = False, splits=None,
           softmax_scale: float | None = None, return_lse: bool = False, *, out=None, tiling: Tiling | None = None):
    """Attention of 1..16 new queries per sequence against a K/V cache.

    q: (B, H, Nq, D), Nq <= 16, D 64 or 128, float16 or bfloat16. k_cache, v_cache: dense (B, Hkv, Nk, D), or
    paged (num_pages, page_size, Hkv, D) with block_table (B, max_pages) int32 page numbers (vLLM / FA2
    kvcache layout; page_size 16, 32, 64 or 256). cache_seqlens: (B,) int32 keys of each sequence (None: every
    sequence fills the dense cache; required when paged). causal: bottom-right (query i sees keys
    j <= i + len - Nq). splits: None or "auto" (FA2's heuristic), or 1..128 K/V ranges per tile.
    Returns out (B, H, Nq, D), or (out, lse) with lse the fp32 (B, H, Nq) natural-log logsumexp.
    """
    torch = _torch()
    _check_4d(torch, q=q, k_cache=k_cache, v_cache=v_cache)
    dtype = _dtype(q, k_cache, v_cache)
    b, h, nq, d = q.shape
    if not 1 <= nq <= schedule.MAX_QUERIES or min(b, h) < 1:
        raise FlashsimError(f"decode takes 1 to {schedule.MAX_QUERIES} queries per sequence, got q {tuple(q.shape)}")
    hkv, capacity, page_size = _cache_layout(torch, q, k_cache, v_cache, cache_seqlens, block_table)
    family = registry.family("decode")
    default = family.default_tiling(d, None)
    if tiling is not None and not isinstance(tiling, Tiling):
        raise FlashsimError(f"tiling must be an algorithms.tiling.Tiling, got {type(tiling).__name__}")
    variant = family.variant(d, dtype, tiling or default)
    _check_splits(splits)
    _check_device(q, k_cache, v_cache, cache_seqlens, block_table)
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    n_splits = _splits(splits, q, hkv, capacity, index)
    arch = family.arch_for(torch.cuda.get_device_capability(index))

    q = q if _usable(q) else q.contiguous()
    k_cache = k_cache if _usable(k_cache) else k_cache.contiguous()
    v_cache = v_cache if _usable(v_cache) else v_cache.contiguous()
    if block_table is not None and block_table.stride(1) != 1:
        block_table = block_table.contiguous()
    if cache_seqlens is not None:
        cache_seqlens = cache_seqlens.contiguous()
    if out is None:
        out = torch.empty((b, h, nq, d), dtype=q.dtype, device=q.device)
    elif not isinstance(out, torch.Tensor) or tuple(out.shape) != (b, h, nq, d) or out.dtype != q.dtype:
        raise FlashsimError(f"out must be a {q.dtype} tensor of shape {(b, h, nq, d)}")
    elif out.device != q.device or not _usable(out):
        raise FlashsimError("out must be on q's device with a contiguous, 16-byte aligned last dimension")
    lse = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)
    scale = float(softmax_scale) if softmax_scale is not None else d**-0.5
    call = DecodeCall(q, k_cache, v_cache, out, lse, block_table, cache_seqlens, hkv, capacity, page_size,
                      bool(causal), scale, n_splits)
    from .api import bound_kernels

    with torch.cuda.device(index):
        family.run(bound_kernels(family, variant, arch, index, q.device), variant, call)
    return (out, lse) if return_lse else out


def decode_splits(q, k_cache, block_table=None) -> int:
    """The split count decode() launches by default for these tensors (for recording what ran)."""
    torch = _torch()
    b, h, nq, d = q.shape
    hkv = k_cache.shape[2] if block_table is not None else k_cache.shape[1]
    capacity = block_table.shape[1] * k_cache.shape[1] if block_table is not None else k_cache.shape[2]
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    return _splits(None, q, hkv, capacity, index)

