"""The attention problem: shapes, dtype and the FLOP convention every paper uses."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from flashsim.errors import FlashsimError

from .ir import CAUSAL_ALIGNS

# Bytes per element of each input dtype; fp8 means e4m3 (FA3's choice).
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
HEADDIMS = (32, 64, 96, 128, 192, 256)
# FLOPs of each pass by the FA2 paper's convention (section 4.1): the backward runs 5 matmuls of the forward's
# size (S recomputed, dV, dP, dQ, dK) where the forward runs 2 (S, O), so it counts 2.5x the forward's FLOPs.
BACKWARD_FLOPS_RATIO = 2.5
PASS_FLOPS_RATIO = {"fwd": 1.0, "bwd": BACKWARD_FLOPS_RATIO, "fwd+bwd": 1.0 + BACKWARD_FLOPS_RATIO}
# Tokens per page of a paged K/V cache (vLLM's block sizes; FA2 takes multiples of 16 for its block table).
PAGE_SIZES = (16, 32, 64, 128, 256)


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
    # Variable-length batch (cu_seqlens packing): the K/V length of each sequence; seqlen_k is their maximum
    # and each sequence has min(seqlen_q, its length) queries (the last ones). (): every sequence is full.
    seqlens: tuple[int, ...] = ()
    # Paged K/V cache: tokens per page, pages found through a block table (0: K and V are contiguous).
    page_size: int = 0
    elem_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        if self.seqlens:
            self._check_seqlens()
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
        if self.page_size and self.page_size not in PAGE_SIZES:
            raise FlashsimError(f"page size {self.page_size!r} is not supported; choose one of "
                                f"{', '.join(map(str, PAGE_SIZES))}")
        object.__setattr__(self, "elem_bytes", DTYPE_BYTES[self.dtype])

    def _check_seqlens(self) -> None:
        lens = tuple(self.seqlens)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lens):
            raise FlashsimError(f"sequence lengths must be positive integers, got {lens!r}")
        if self.batch != len(lens):
            raise FlashsimError(f"batch ({self.batch}) must equal the number of sequence lengths ({len(lens)})")
        if self.seqlen_k and self.seqlen_k != max(lens):
            raise FlashsimError(f"seqlen_k ({self.seqlen_k}) must be the longest sequence ({max(lens)})")
        object.__setattr__(self, "seqlens", lens)
        object.__setattr__(self, "seqlen_k", max(lens))
        if isinstance(self.seqlen_q, int) and self.seqlen_q > max(lens):
            object.__setattr__(self, "seqlen_q", max(lens))

    @property
    def varlen(self) -> bool:
        return bool(self.seqlens)

    def k_len(self, b: int) -> int:
        """Keys of sequence b."""
        return self.seqlens[b] if self.seqlens else self.seqlen_k

    def q_len(self, b: int) -> int:
        """Queries of sequence b."""
        return min(self.seqlen_q, self.seqlens[b]) if self.seqlens else self.seqlen_q

    def sequence(self, b: int) -> Problem:
        """Sequence b as a problem of its own (batch 1): what one sequence's tiles see of the problem."""
        if not self.seqlens:
            return self
        return replace(self, batch=1, seqlen_q=self.q_len(b), seqlen_k=self.k_len(b), seqlens=())

    def padded(self) -> Problem:
        """The same batch padded to its longest sequence (what a kernel without cu_seqlens runs)."""
        return replace(self, seqlens=()) if self.seqlens else self

    @property
    def group(self) -> int:
        """Query heads that share one K/V head (1 without GQA)."""
        return self.heads // self.kv_heads

    @property
    def scale(self) -> float:
        return self.headdim**-0.5

    def flops(self, pass_: str = "fwd") -> float:
        """FLOPs by the papers' convention: forward 4 B H Nq Nk d (a variable-length batch: each sequence's
        own lengths), halved for causal; the backward 2.5x that (BACKWARD_FLOPS_RATIO), fwd+bwd 3.5x."""
        if pass_ not in PASS_FLOPS_RATIO:
            raise FlashsimError(f"unknown pass {pass_!r}; choose one of {', '.join(PASS_FLOPS_RATIO)}")
        pairs = sum(self.q_len(b) * self.k_len(b) for b in range(self.batch))
        f = 4.0 * self.heads * pairs * self.headdim * PASS_FLOPS_RATIO[pass_]
        return f / 2 if self.causal else f

    def describe(self, dtype: bool = True) -> str:
        kv = f" kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        nk = f" Nk={self.seqlen_k}" if self.seqlen_k != self.seqlen_q else ""
        causal = " causal" if self.causal else ""
        if self.causal and self.causal_align != "bottom-right" and self.seqlen_q != self.seqlen_k:
            causal += f" ({self.causal_align})"
        dt = f" {self.dtype}" if dtype else ""
        lens = f" seqlens={','.join(map(str, self.seqlens))}" if self.seqlens else ""
        paged = f" paged {self.page_size}" if self.page_size else ""
        return f"B={self.batch} H={self.heads}{kv} N={self.seqlen_q}{nk}{lens} d={self.headdim}{dt}{causal}{paged}"

    def as_dict(self) -> dict:
        layout = {"seqlens": list(self.seqlens)} if self.seqlens else {}
        if self.page_size:
            layout["page_size"] = self.page_size
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
            **layout,
            "flops": self.flops(),
        }
