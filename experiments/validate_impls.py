"""What validate and its ncu child both run: the configurations, the implementations, their inputs and calls,
and the tiling our kernels run (so the simulator runs the same). A module of its own so that validate.py
and validate_ncu.py import it, not each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from flashsim.errors import FlashsimError

from . import validate_support as support

# What a configuration measures. fwd: the forward. bwd: the backward kernels alone (the forward runs outside
# the timed call). decode: a decoding step's forward against a K/V cache, simulated by the decode schedule.
PASSES = ("fwd", "bwd", "decode")
FORWARD_PASS, BACKWARD_PASS, DECODE_PASS = PASSES
# Our kernels with a backward (kernels.attention_backward).
BACKWARD_KERNELS = ("v2",)
# The simulator's backward schedule of each forward one (algorithms/backward.py's records say the same).
BACKWARD_ALGO = {"standard": "standard-bwd", "v2": "v2-bwd", "v3": "v3-bwd"}


@dataclass(frozen=True)
class Config:
    batch: int
    heads: int
    seqlen_q: int
    headdim: int
    causal: bool = False
    seqlen_k: int = 0
    kv_heads: int = 0
    # defaulted so that every forward configuration keeps its id and its records
    pass_name: str = "fwd"
    page_size: int = 0  # decode: tokens per page of the K/V cache (0: dense)

    def __post_init__(self) -> None:
        if self.pass_name not in PASSES:
            raise FlashsimError(f"unknown pass {self.pass_name!r}; choose one of {', '.join(PASSES)}")
        if self.page_size and not self.is_decode:
            raise FlashsimError(f"a page size is a decode configuration's, not a {self.pass_name} one's")

    @property
    def is_decode(self) -> bool:
        return self.pass_name == DECODE_PASS

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
        paged = f"-p{self.page_size}" if self.page_size else ""
        pass_ = f"-{self.pass_name}" if self.pass_name != "fwd" else ""
        return f"b{self.batch}-h{self.heads}{kv}-n{self.seqlen_q}{nk}-d{self.headdim}{causal}{paged}{pass_}"

    def problem_dict(self, dtype: str, causal_align: str = support.DEFAULT_ALIGN, paged: bool = False) -> dict:
        """The arguments of algorithms.Problem for this configuration, run with the given causal alignment
        (and with its paged K/V cache where the implementation ran one)."""
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
        if paged and self.page_size:
            args["page_size"] = self.page_size
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
    paged: bool = False  # takes the decode set's paged K/V cache (SDPA's backends run it dense)
    # the forward schedule's form of the exponential where the kernel's code differs from ours (the tiling's
    # exp2; "" for the schedule's own): what its SASS issues per exponential
    exp2: str = ""
    # the library's own launch rule where it is known (simulator/sdpa.py): "cudnn-sm90" (fixed tiles and head
    # dims), "fa2" (its tiles and split-KV rule, which need the GPU: settled at simulation); "" for the schedule's
    launch: str = ""


DENSE_STAND_IN = "on the decode set a dense K/V cache: SDPA has no paged cache, the dense call stands in"


IMPLS: dict[str, Impl] = {
    i.name: i
    for i in (
        Impl("standard", "standard", "bf16", "ours"),
        Impl("v1", "v1", "bf16", "ours"),
        Impl("v2", "v2", "bf16", "ours"),
        Impl("v3", "v3", "bf16", "ours"),
        Impl("v3-fp8", "v3-fp8", "fp8", "ours", note="bf16 inputs, fp8 e4m3 inside"),
        Impl("sdpa-flash", "v2", "bf16", "sdpa", "FLASH_ATTENTION",
             f"FA2 kernels, FA2 tiles and split rule, PyTorch's exp2f; {DENSE_STAND_IN}", exp2="exp2f",
             launch="fa2"),
        Impl("sdpa-cudnn", "v3", "bf16", "sdpa", "CUDNN_ATTENTION",
             f"cuDNN Hopper kernel, its tiles and head dims (simulator/sdpa.py); {DENSE_STAND_IN}",
             launch="cudnn-sm90"),  # fmt: skip
        Impl("sdpa-math", "standard", "fp32", "sdpa", "MATH", "unfused, upcast to fp32, cuBLAS FFMA SGEMMs"),
        Impl("sdpa-math-bf16", "standard", "bf16", "sdpa", "MATH", "unfused, bf16 cuBLAS GEMMs and softmax"),
        Impl("sdpa-efficient", "v2", "bf16", "sdpa", "EFFICIENT_ATTENTION",
             f"memory-efficient (CUTLASS) kernels, simulated as v2; {DENSE_STAND_IN}"),  # fmt: skip
        Impl("decode", "decode", "bf16", "ours", note="our decode kernel: split-KV, packed GQA heads, the set's "
             "paged or dense K/V cache", paged=True),  # fmt: skip
    )
}
# What the development set measures unless --impls says otherwise: every forward implementation it had
# before the decode and backward sets came.
DEV_IMPLS = ["standard", "v1", "v2", "v3", "v3-fp8", "sdpa-flash", "sdpa-cudnn", "sdpa-math", "sdpa-math-bf16"]


def launch_rule(impl: Impl, algo: str, headdim: int) -> tuple[dict | None, int]:
    """(tiling dict or None, head dim the kernel runs) for a forward record of impl: the library's own launch
    where simulator/sdpa.py knows it, else (None, headdim)."""
    if impl.launch == "cudnn-sm90" and algo == impl.algo:
        from flashsim.simulator.sdpa import cudnn_sm90_headdim, cudnn_sm90_tiling

        return cudnn_sm90_tiling(headdim), cudnn_sm90_headdim(headdim)
    return None, headdim


def sim_algo(impl: Impl, cfg: Config) -> str:
    """The simulator's schedule for impl on cfg: its forward one, that one's backward, or the decode schedule
    (the one model of a decoding step, for SDPA's kernels too)."""
    if cfg.is_decode:
        return DECODE_PASS  # the decode schedule's name
    if cfg.pass_name == BACKWARD_PASS:
        return BACKWARD_ALGO.get(impl.algo, f"{impl.algo}-bwd")
    return impl.algo


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
    """The call to time: the forward, or (validate_passes) the backward alone or a decoding step."""
    if cfg.pass_name != "fwd":
        from . import validate_passes

        return validate_passes.make_call(impl, q, k, v, cfg)
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
    from flashsim.kernels import registry
    from flashsim.kernels.launch import device_limits

    family = impl.name if cfg.pass_name == "fwd" else sim_algo(impl, cfg)
    if cfg.pass_name != "fwd" and family not in registry.families():
        return None  # a kernel outside the registry: the simulator takes the schedule's own tiles
    tiling = kernel_tiling(family, cfg.headdim, cfg.causal, device_limits(q.device) if q is not None else None)
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
