"""What validate and its ncu child both run: the configurations, the implementations, their inputs and calls,
and the tiling our kernels run (so the simulator runs the same). A module of its own so that validate.py
and validate_ncu.py import it, not each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from . import validate_support as support


@dataclass(frozen=True)
class Config:
    batch: int
    heads: int
    seqlen_q: int
    headdim: int
    causal: bool = False
    seqlen_k: int = 0
    kv_heads: int = 0

    @property
    def nk(self) -> int:
        return self.seqlen_k or self.seqlen_q

    @property
    def hkv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def id(self) -> str:
        nk = f"-k{self.nk}" if self.nk != self.seqlen_q else ""
        kv = f"-kv{self.hkv}" if self.hkv != self.heads else ""
        causal = "-causal" if self.causal else ""
        return f"b{self.batch}-h{self.heads}{kv}-n{self.seqlen_q}{nk}-d{self.headdim}{causal}"

    def problem_dict(self, dtype: str, causal_align: str = support.DEFAULT_ALIGN) -> dict:
        """The arguments of algorithms.Problem for this configuration, run with the given causal alignment."""
        args = {
            "batch": self.batch,
            "heads": self.heads,
            "kv_heads": self.hkv,
            "seqlen_q": self.seqlen_q,
            "seqlen_k": self.nk,
            "headdim": self.headdim,
            "causal": self.causal,
            "dtype": dtype,
        }
        # a non-default alignment is recorded only where it changes the mask, so other records read as before
        if causal_align != support.DEFAULT_ALIGN and support.alignment_matters(self):
            args["causal_align"] = causal_align
        return args


@dataclass(frozen=True)
class Impl:
    """A measured implementation and what the simulator runs for it."""

    name: str
    algo: str  # simulator algorithm
    sim_dtype: str  # dtype of the simulated problem
    kind: str  # "ours" | "sdpa"
    backend: str = ""  # SDPA backend name
    note: str = ""


IMPLS: dict[str, Impl] = {
    i.name: i
    for i in (
        Impl("standard", "standard", "bf16", "ours"),
        Impl("v1", "v1", "bf16", "ours"),
        Impl("v2", "v2", "bf16", "ours"),
        Impl("v3", "v3", "bf16", "ours"),
        Impl("v3-fp8", "v3-fp8", "fp8", "ours", note="bf16 inputs, fp8 e4m3 inside"),
        Impl("decode", "decode", "bf16", "ours", note="Nq <= 16: split-KV over packed GQA rows"),
        Impl("sdpa-flash", "v2", "bf16", "sdpa", "FLASH_ATTENTION", "FA2 kernels, FA2 tiles"),
        Impl("sdpa-cudnn", "v3", "bf16", "sdpa", "CUDNN_ATTENTION", "cuDNN Hopper kernel, FA3 tiles assumed"),
        Impl("sdpa-math", "standard", "fp32", "sdpa", "MATH", "unfused, upcast to fp32, cuBLAS FFMA SGEMMs"),
        Impl("sdpa-math-bf16", "standard", "bf16", "sdpa", "MATH", "unfused, bf16 cuBLAS GEMMs and softmax"),
    )
}


def key(kind: str, impl: str, cfg: Config) -> str:
    return f"{kind}|{impl}|{cfg.id}"


# -- running one implementation ---------------------------------------------------------------------------


@contextlib.contextmanager
def impl_context(impl: Impl):
    """The SDPA backend selection (and math's bf16 switch) around a run; nothing for our kernels."""
    if impl.kind != "sdpa":
        yield
        return
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    allow = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(impl.name == "sdpa-math-bf16")
    try:
        with sdpa_kernel([getattr(SDPBackend, impl.backend)]):
            yield
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(allow)


def make_call(impl: Impl, q, k, v, cfg: Config) -> Callable[[], object]:
    if impl.kind == "ours":
        from flashsim import kernels

        return lambda: kernels.attention(q, k, v, algo=impl.name, causal=cfg.causal)
    import torch.nn.functional as F

    gqa = cfg.hkv != cfg.heads
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=cfg.causal, enable_gqa=gqa)


def kernel_tiling(name: str, headdim: int, causal: bool, limits=None) -> dict:
    """The tiling our kernel `name` runs for this head dim and mask when the caller names none (the
    registry's tile table; for v3 / v3-fp8 the rows of kernels/v3_tiles.tsv), as a Tiling dict."""
    from flashsim.kernels import registry

    return registry.family(name).tiling_for(headdim, limits, causal).as_dict()


def our_tiling(impl: Impl, cfg: Config, q, k, v) -> dict | None:
    """The tiling our kernel runs for this call, so the simulator runs the same one (None: not ours).
    Errors propagate: a comparison that silently simulated other tiles would be wrong, not partial."""
    if impl.kind != "ours":
        return None
    from flashsim.kernels.launch import device_limits

    tiling = kernel_tiling(impl.name, cfg.headdim, cfg.causal, device_limits(q.device) if q is not None else None)
    if impl.name == "v1":
        from flashsim.kernels.api import v1_splits

        tiling["splits"] = v1_splits(q, k, v)
    from flashsim.kernels import registry

    launched_splits = registry.family(impl.name).launched_splits
    if launched_splits is not None:
        tiling["splits"] = launched_splits(q, k)
    return tiling


def inputs(cfg: Config, seed: int = 0):
    """q, k, v as SDPA lays them out, (B, H, N, D) bf16, N(0,1) entries."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    shape_q = (cfg.batch, cfg.heads, cfg.seqlen_q, cfg.headdim)
    shape_kv = (cfg.batch, cfg.hkv, cfg.nk, cfg.headdim)
    q = torch.randn(shape_q, generator=g, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(shape_kv, generator=g, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(shape_kv, generator=g, device="cuda", dtype=torch.bfloat16)
    return q, k, v
