"""attention(q, k, v, algo=...): the reference kernels, callable from PyTorch.

Checks run in the order a caller can fix them: algorithm, tensors (dtype, shape), tiling, device, GPU
generation. The first use of a (family, arch) loads its cubin, building it with nvcc first when the
build directory has none that matches the sources.
"""

from __future__ import annotations

import contextlib
import functools

from flashsim.algorithms.tiling import Tiling
from flashsim.errors import FlashsimError

from . import build, driver, registry
from .launch import BoundKernels, Call, device_limits

_DTYPES = {"float16": "fp16", "bfloat16": "bf16"}
_MAX_OFFSET = 2**31  # the kernels address one head's rows with 32-bit offsets
# Modules loaded in this process, by (algo, arch, device, build dir): after the first call a launch costs
# no file reads (the manifest check hashes the sources, ~0.2 ms, more than a short kernel runs).
_modules: dict[tuple[str, str, int, str], object] = {}


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(index)


@functools.cache
def _limits(index: int):
    import torch

    return device_limits(torch.device("cuda", index))


def _module(family, arch: str, index: int):
    key = (family.algo, arch, index, str(build.build_dir()))
    module = _modules.get(key)
    if module is None:
        module = _modules[key] = driver.load_module(index, build.ensure_built(family, arch))
    return module


def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        raise FlashsimError("the kernels need PyTorch") from exc
    return torch


def _check_tensors(torch, q, k, v) -> str:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise FlashsimError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise FlashsimError(f"{name} must be 4-D (batch, heads, seqlen, headdim), got shape {tuple(t.shape)}")
    dtype = str(q.dtype).removeprefix("torch.")
    if dtype not in _DTYPES:
        raise FlashsimError(f"q has dtype {dtype}; the kernels take float16 or bfloat16")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise FlashsimError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    b, h, nq, d = q.shape
    bk, hkv, nk, dk = k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise FlashsimError(f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if bk != b or dk != d:
        raise FlashsimError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree on batch and head dim")
    if min(b, h, nq, nk, d, hkv) < 1:
        raise FlashsimError(f"empty input: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if h % hkv:
        raise FlashsimError(f"q has {h} heads, not a multiple of k's {hkv} (grouped-query attention needs one)")
    return _DTYPES[dtype]


def _usable(t) -> bool:
    """Last dimension contiguous, 16-byte aligned base and rows (the kernels copy 16-byte chunks)."""
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(s % 8 == 0 for s in t.stride()[:-1])


def _prepare(t):
    return t if _usable(t) else t.contiguous()


def attention(
    q,
    k,
    v,
    algo: str = "v2",
    causal: bool = False,
    tiling: Tiling | None = None,
    softmax_scale: float | None = None,
    *,
    out=None,
    return_lse: bool = False,
    splits: int | None = None,
):
    """Attention forward with flashsim's reference kernels.

    q: (B, H, Nq, D); k, v: (B, Hkv, Nk, D) with H a multiple of Hkv (grouped-query attention); float16 or
    bfloat16 on one CUDA device (torch SDPA's layout). causal: aligned bottom-right, as FlashAttention
    >= 2.1 and the simulator (query i sees keys j <= i + Nk - Nq; with Nq == Nk this is SDPA's is_causal);
    a row that sees no key (Nq > Nk) outputs 0 with a logsumexp of -inf. tiling: a Tiling the kernels
    were built with (None: the algorithm's default, the public FA2 tiles for v2; for v3 and v3-fp8 the
    default rows of kernels/v3_tiles.tsv). softmax_scale: None means D**-0.5.
    out: optional (B, H, Nq, D) tensor to write into. return_lse: also return the fp32 (B, H, Nq)
    natural-log logsumexp. splits: v1: thread blocks per (batch, head), None fills the GPU, 1 is the
    paper's grid; decode (Nq <= 16, kernels.decode for paged caches): K/V ranges per tile, None is FA2's rule.
    Returns out (or (out, lse)).
    """
    torch = _torch()
    if algo in _HOPPER:
        return _hopper(torch, algo, q, k, v, causal, tiling, softmax_scale, out, return_lse)
    family = registry.family(algo)
    if family.attention is not None:
        return family.attention(q, k, v, causal=causal, tiling=tiling, softmax_scale=softmax_scale, out=out,
                                return_lse=return_lse, splits=splits)
    dtype = _check_tensors(torch, q, k, v)
    b, h, nq, d = q.shape
    if tiling is None:
        tiling = family.default_tiling(d, _limits(q.device.index) if q.is_cuda else None)
    elif not isinstance(tiling, Tiling):
        raise FlashsimError(f"tiling must be an algorithms.tiling.Tiling, got {type(tiling).__name__}")
    variant = family.variant(d, dtype, tiling)
    if splits is not None and (algo != "v1" or int(splits) < 1):
        raise FlashsimError("splits is a v1 and decode option and must be a positive integer")

    if not all(t.is_cuda for t in (q, k, v)):
        raise FlashsimError(f"the kernels run on CUDA tensors; got q on {q.device}, k on {k.device}, v on {v.device}")
    if k.device != q.device or v.device != q.device:
        raise FlashsimError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    arch = family.arch_for(_capability(index))

    q, k, v = (_prepare(t) for t in (q, k, v))
    if out is None:
        out = torch.empty((b, h, nq, d), dtype=q.dtype, device=q.device)
    elif not isinstance(out, torch.Tensor) or tuple(out.shape) != (b, h, nq, d) or out.dtype != q.dtype:
        raise FlashsimError(f"out must be a {q.dtype} tensor of shape {(b, h, nq, d)}")
    elif out.device != q.device or not _usable(out):
        raise FlashsimError("out must be on q's device with a contiguous, 16-byte aligned last dimension")
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if (t.shape[2] - 1) * t.stride(2) + d >= _MAX_OFFSET:
            raise FlashsimError(f"{name}'s rows of one head span 2^31 elements or more; the kernels address less")
    lse = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)

    scale = float(softmax_scale) if softmax_scale is not None else d**-0.5
    call = Call(q, k, v, out, lse, bool(causal), scale, {"splits": splits})
    switch = torch.cuda.device(index) if index != torch.cuda.current_device() else contextlib.nullcontext()
    with switch:
        module = _module(family, arch, index)
        family.run(BoundKernels(module, variant.symbol(family.algo), q.device), variant, call)
    return (out, lse) if return_lse else out


def bound_kernels(family, variant, arch: str, index: int, device) -> BoundKernels:
    """The kernels of one built variant on device `index` (its cubin loaded, and built first if stale)."""
    return BoundKernels(_module(family, arch, index), variant.symbol(family.algo), device)


def v1_splits(q, k, v, tiling: Tiling | None = None) -> int:
    """The thread blocks per (batch, head) attention(algo="v1") launches for these tensors by default
    (FA1's wave-efficiency rule over the blocks the built kernel fits on q's GPU)."""
    from . import v1

    family = registry.family("v1")
    dtype = _check_tensors(torch_mod := _torch(), q, k, v)
    index = q.device.index if q.device.index is not None else torch_mod.cuda.current_device()
    variant = family.variant(q.shape[-1], dtype, tiling or family.default_tiling(q.shape[-1], _limits(index)))
    module = _module(family, family.arch_for(_capability(index)), index)
    call = Call(q, k, v, None, None, False, 1.0, {"splits": None})
    return v1.splits_for(call, variant, BoundKernels(module, variant.symbol("v1"), q.device).registers("fwd"))


_HOPPER = ("v3", "v3-fp8")


def _hopper(torch, algo, q, k, v, causal, tiling, softmax_scale, out, return_lse):
    """v3 and v3-fp8 launch through kernels/hopper.py (TMA tensor maps, wgmma: sm_90 only)."""
    from flashsim.algorithms.tiling import check_algo

    check_algo(algo)
    _check_tensors(torch, q, k, v)
    if not (q.is_cuda and k.is_cuda and v.is_cuda):
        raise FlashsimError(f"the kernels run on CUDA tensors; got q on {q.device}")
    major, minor = torch.cuda.get_device_capability(q.device)
    if (major, minor) != (9, 0):
        raise FlashsimError(f"{algo} uses wgmma and TMA and runs on sm_90 (Hopper) only; this GPU is sm_{major}{minor}")
    if return_lse:
        raise FlashsimError(f"{algo} does not return the logsumexp")
    if algo == "v3":
        from . import hopper

        return hopper.attention(q, k, v, causal=causal, tiling=tiling, out=out, scale=softmax_scale)
    if softmax_scale is not None:
        raise FlashsimError("v3-fp8 uses the default softmax scale, d**-0.5")
    from . import hopper_fp8

    return hopper_fp8.attention(q, k, v, causal=causal, tiling=tiling, out=out)


def available() -> dict[str, list[str]]:
    """algo -> the variants built into its family (what `tiling=` may name)."""
    return {algo: [v.describe() for v in fam.variants] for algo, fam in registry.families().items()}
