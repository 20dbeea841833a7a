"""Launch description of v2_bwd.cu: FlashAttention-2's backward (the schedule algorithms/ calls "v2-bwd").

Five entries per variant: dot_do_o (D = rowsum(dO * O), dQaccum zeroed), bwd (one thread block per K/V
block), convert_dq, and with grouped-query attention zero_dkv and convert_dkv around bwd (the query heads of
a group add their dK, dV into fp32 sums of their K/V head, as the schedule models). Tensors are contiguous
(kernels/backward.py makes them so); the kernels take one BwdParams, mirrored here.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from types import SimpleNamespace

from flashsim.algorithms.problem import Problem
from flashsim.algorithms.tiling import Tiling, default_tiling
from flashsim.errors import FlashsimError

from .launch import cdiv, smem_tile_bytes
from .registry import DTYPES, KernelFamily, Variant, register

# The tiles the record's mapper picks where a block may take >= 144 KB of shared memory (A100, H100, H200):
# FA2's run_mha_bwd_hdim64 / hdim128 choices, 8 warps, Q double-buffered.
TILES = {64: (128, 128, 8), 128: (64, 128, 8)}
_HOPPER_SMEM = SimpleNamespace(smem_per_block_max_bytes=232448, smem_per_sm_bytes=233472)
ENTRIES = ("dot_do_o", "bwd", "convert_dq", "zero_dkv", "convert_dkv")
PARAMS_BYTES = 136  # static_assert in v2_bwd.cu

_P, _I32, _F32 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_float


class BwdParams(ctypes.Structure):
    _fields_ = [
        ("q", _P), ("k", _P), ("v", _P), ("o", _P), ("dout", _P), ("lse", _P), ("dpsum", _P),
        ("dq_accum", _P), ("dk_accum", _P), ("dv_accum", _P), ("dq", _P), ("dk", _P), ("dv", _P),
        ("batch", _I32), ("heads", _I32), ("kv_group", _I32), ("seqlen_q", _I32), ("seqlen_k", _I32),
        ("causal", _I32), ("scale", _F32), ("scale_log2", _F32),
    ]  # fmt: skip


assert ctypes.sizeof(BwdParams) == PARAMS_BYTES


@dataclass
class BwdCall:
    """One checked backward call: contiguous q, out, dout (B, H, Nq, D); k, v (B, Hkv, Nk, D); lse (B, H, Nq)
    fp32; dq, dk, dv allocated like q, k, v; workspaces allocated by run()."""

    q: object
    k: object
    v: object
    out: object
    lse: object
    dout: object
    dq: object
    dk: object
    dv: object
    causal: bool
    scale: float

    @property
    def shape(self) -> tuple[int, int, int, int, int, int]:
        """(batch, heads, kv_heads, seqlen_q, seqlen_k, headdim)"""
        b, h, nq, d = self.q.shape
        return b, h, self.k.shape[1], nq, self.k.shape[2], d

    def params(self, dpsum, dq_accum, dk_accum, dv_accum) -> BwdParams:
        b, h, hkv, nq, nk, _ = self.shape
        p = BwdParams()
        for name in ("q", "k", "v", "dout", "lse", "dq", "dk", "dv"):
            setattr(p, name, getattr(self, name).data_ptr())
        p.o = self.out.data_ptr()
        p.dpsum, p.dq_accum = dpsum.data_ptr(), dq_accum.data_ptr()
        p.dk_accum = dk_accum.data_ptr() if dk_accum is not None else None
        p.dv_accum = dv_accum.data_ptr() if dv_accum is not None else None
        p.batch, p.heads, p.kv_group, p.seqlen_q, p.seqlen_k = b, h, h // hkv, nq, nk
        p.causal = int(self.causal)
        p.scale = self.scale
        p.scale_log2 = self.scale * math.log2(math.e)
        return p


def smem_bytes(variant: Variant, entry: str) -> int:
    """v2bwd::Config::kSmemBytes for bwd (two Q tiles, dO, K, V, P, dS); the other entries use none."""
    if entry != "bwd":
        return 0
    t, d = variant.tiling, variant.headdim
    return 3 * smem_tile_bytes(t.block_m, d) + 2 * smem_tile_bytes(t.block_n, d) + 2 * smem_tile_bytes(
        t.block_m, t.block_n
    )


def default(headdim: int, limits) -> Tiling:
    problem = Problem(batch=1, heads=1, seqlen_q=128, headdim=headdim)
    return default_tiling("v2-bwd", problem, limits or _HOPPER_SMEM)


def run(kernels, variant: Variant, call) -> None:
    if not isinstance(call, BwdCall):
        raise FlashsimError("v2-bwd is a backward pass: call kernels.attention_backward, not attention")
    import torch

    b, h, hkv, nq, nk, d = call.shape
    t = variant.tiling
    dev = call.q.device
    dpsum = torch.empty((b, h, nq), dtype=torch.float32, device=dev)
    dq_accum = torch.empty((b, h, nq, d), dtype=torch.float32, device=dev)
    grouped = h != hkv
    dk_accum = torch.empty((b, hkv, nk, d), dtype=torch.float32, device=dev) if grouped else None
    dv_accum = torch.empty_like(dk_accum) if grouped else None
    p = call.params(dpsum, dq_accum, dk_accum, dv_accum)
    threads = t.threads
    kv_elems = b * hkv * nk * d
    if grouped:
        kernels.launch("zero_dkv", (cdiv(kv_elems // 4, threads), 1, 1), threads, 0, p)
    kernels.launch("dot_do_o", (cdiv(nq, t.block_m), h, b), threads, 0, p)
    kernels.launch("bwd", (cdiv(nk, t.block_n), b, h), threads, smem_bytes(variant, "bwd"), p)
    kernels.launch("convert_dq", (cdiv(b * h * nq * d // 8, threads), 1, 1), threads, 0, p)
    if grouped:
        kernels.launch("convert_dkv", (cdiv(kv_elems // 8, threads), 1, 1), threads, 0, p)


FAMILY = register(
    KernelFamily(
        algo="v2-bwd",
        source="v2_bwd.cu",
        macro="FLASHSIM_V2_BWD",
        entries=ENTRIES,
        variants=tuple(Variant(d, dtype, Tiling(bm, bn, w, 2)) for d, (bm, bn, w) in TILES.items() for dtype in DTYPES),
        smem_bytes=smem_bytes,
        default_tiling=default,
        run=run,
        summary="FlashAttention-2 backward: a block per K/V tile, P recomputed from the LSE, dQ by fp32 atomics",
    )
)
