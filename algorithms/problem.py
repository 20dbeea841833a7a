"""The attention problem: shapes, dtype and the FLOP convention every paper uses."""

from __future__ import annotations

from dataclasses import dataclass, field

from flashsim.errors import FlashsimError

from .ir import CAUSAL_ALIGNS

# Bytes per element of each input dtype; fp8 means e4m3 (FA3's choice).
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
HEADDIMS = (32, 64, 96, 128, 192, 256)
# FLOPs of each pass by the FA2 paper's convention (section 4.1): the backward runs 5 matmuls of the forward's
# size (S recomputed, dV, dP, dQ, dK) where the forward runs 2 (S, O), so it counts 2.5x the forward's FLOPs.
BACKWARD_FLOPS_RATIO = 2.5
PASS_FLOPS_RATIO = {"fwd": 1.0, "bwd": BACKWARD_FLOPS_RATIO, "fwd+bwd": 1.0 + BACKWARD_FLOPS_RATIO}


@dataclass(frozen=True)
class Problem:
    """One attention call. Q is (B, H, Nq, D); K and V are (B, Hkv, Nk, D)."""

    batch: int
    heads: int
    seqlen_q: int
    headdim: int
    seqlen_k: int = 0  # 0: same as seqlen_q
    kv_heads: int = 0  # 0: same as heads (no GQA)
    causal: bool = False
    dtype: str = "bf16"
    # Which keys a causal query row sees when seqlen_q != seqlen_k (algorithms/ir.py, causal_offset).
    causal_align: str = "bottom-right"
    elem_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        if not self.seqlen_k:
            object.__setattr__(self, "seqlen_k", self.seqlen_q)
        if not self.kv_heads:
            object.__setattr__(self, "kv_heads", self.heads)
        for name in ("batch", "heads", "seqlen_q", "seqlen_k", "kv_heads", "headdim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise FlashsimError(f"{name} must be a positive integer, got {value!r}")
        if self.headdim not in HEADDIMS:
            raise FlashsimError(
                f"head dim {self.headdim} is not supported; choose one of {', '.join(map(str, HEADDIMS))}"
            )
        if self.heads % self.kv_heads:
            raise FlashsimError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.dtype not in DTYPE_BYTES:
            raise FlashsimError(f"unknown dtype {self.dtype!r}; choose one of {', '.join(DTYPE_BYTES)}")
        if self.causal_align not in CAUSAL_ALIGNS:
            raise FlashsimError(f"unknown causal_align {self.causal_align!r}; choose one of {', '.join(CAUSAL_ALIGNS)}")
        object.__setattr__(self, "elem_bytes", DTYPE_BYTES[self.dtype])

    @property
    def group(self) -> int:
        """Query heads that share one K/V head (1 without GQA)."""
        return self.heads // self.kv_heads

    @property
    def scale(self) -> float:
        return self.headdim**-0.5

    def flops(self, pass_: str = "fwd") -> float:
        """FLOPs by the papers' convention: forward 4 B H Nq Nk d, halved for causal; the backward 2.5x that
        (BACKWARD_FLOPS_RATIO), fwd+bwd 3.5x."""
        if pass_ not in PASS_FLOPS_RATIO:
            raise FlashsimError(f"unknown pass {pass_!r}; choose one of {', '.join(PASS_FLOPS_RATIO)}")
        f = 4.0 * self.batch * self.heads * self.seqlen_q * self.seqlen_k * self.headdim * PASS_FLOPS_RATIO[pass_]
        return f / 2 if self.causal else f

    def describe(self, dtype: bool = True) -> str:
        kv = f" kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        nk = f" Nk={self.seqlen_k}" if self.seqlen_k != self.seqlen_q else ""
        causal = " causal" if self.causal else ""
        if self.causal and self.causal_align != "bottom-right" and self.seqlen_q != self.seqlen_k:
            causal += f" ({self.causal_align})"
        dt = f" {self.dtype}" if dtype else ""
        return f"B={self.batch} H={self.heads}{kv} N={self.seqlen_q}{nk} d={self.headdim}{dt}{causal}"

    def as_dict(self) -> dict:
        return {
            "batch": self.batch,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "seqlen_q": self.seqlen_q,
            "seqlen_k": self.seqlen_k,
            "headdim": self.headdim,
            "causal": self.causal,
            "causal_align": self.causal_align,
            "dtype": self.dtype,
            "flops": self.flops(),
        }
