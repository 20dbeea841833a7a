"""Launch description of decode.cu: split-KV decode with packed GQA rows, dense or paged K/V cache.

The kernel takes its own parameter struct (DecodeParams, mirrored here field for field: pointers, then 64-bit
strides, then 32-bit values) because a paged cache needs a block table, per-sequence lengths and a workspace
that AttnParams has no room for. kernels/decode_api.py checks the tensors and builds a DecodeCall.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

from flashsim.algorithms.schedules.decode import kernel_tiling
from flashsim.algorithms.splitkv import combine_rows
from flashsim.algorithms.tiling import Tiling

from .launch import cdiv, smem_tile_bytes
from .registry import DTYPES, KernelFamily, Variant, register

_P, _I64, _I32, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float
PARAMS_BYTES = 224  # static_assert in decode.cu
# K/V keys per block and ring depth per head dim: the decode record's kernel_tiling, so the simulator and the
# kernel name one tiling (one stage, a K and a V tile, is 32 KiB; three stages plus the Q tile let two thread
# blocks share an H100/H200 SM, with two blocks in flight while a third is multiplied).
TILES = {d: kernel_tiling(d) for d in (64, 128)}

class DecodeParams(ctypes.Structure):
    _fields_ = [
        ("q", _P), ("k", _P), ("v", _P), ("o", _P), ("lse", _P), ("ws_o", _P), ("ws_lse", _P),
        ("block_table", _P), ("seqlens", _P),
        ("q_batch_stride", _I64), ("q_head_stride", _I64), ("q_row_stride", _I64),
        ("k_page_stride", _I64), ("k_head_stride", _I64), ("k_row_stride", _I64),
        ("v_page_stride", _I64), ("v_head_stride", _I64), ("v_row_stride", _I64),
        ("o_batch_stride", _I64), ("o_head_stride", _I64), ("o_row_stride", _I64),
        ("table_stride", _I64),
        ("batch", _I32), ("heads", _I32), ("kv_heads", _I32), ("group", _I32), ("seqlen_q", _I32),
        ("seqlen_k", _I32), ("page_shift", _I32), ("causal", _I32), ("num_splits", _I32), ("row_blocks", _I32),
        ("scale_log2", _F32), ("pad_", _I32),
    ]  # fmt: skip


assert ctypes.sizeof(DecodeParams) == PARAMS_BYTES


@dataclass
class DecodeCall:
    """One checked decode call. q, out: (B, H, Nq, D); k, v: dense (B, Hkv, Nk, D) or paged (pages,
    page_size, Hkv, D) with block_table (B, max_pages) int32; seqlens: (B,) int32 or None (every sequence
    has seqlen_k keys); lse: (B, H, Nq) fp32; splits: resolved (>= 1)."""

    q: object
    k: object
    v: object
    out: object
    lse: object
    block_table: object | None
    seqlens: object | None
    kv_heads: int
    seqlen_k: int  # dense: Nk; paged: the longest sequence
    page_size: int  # 0: dense
    causal: bool
    scale: float
    splits: int

    def params(self, ws_o=None, ws_lse=None) -> DecodeParams:
        b, h, nq, _ = self.q.shape
        p = DecodeParams()
        p.q, p.k, p.v, p.o, p.lse = (t.data_ptr() for t in (self.q, self.k, self.v, self.out, self.lse))
        p.ws_o = ws_o.data_ptr() if ws_o is not None else None
        p.ws_lse = ws_lse.data_ptr() if ws_lse is not None else None
        p.block_table = self.block_table.data_ptr() if self.block_table is not None else None
        p.seqlens = self.seqlens.data_ptr() if self.seqlens is not None else None
        p.q_batch_stride, p.q_head_stride, p.q_row_stride, _ = self.q.stride()
        p.o_batch_stride, p.o_head_stride, p.o_row_stride, _ = self.out.stride()
        for name in ("k", "v"):
            s = getattr(self, name).stride()
            # dense (B, Hkv, Nk, D): batch, head, row; paged (pages, page_size, Hkv, D): page, row, head
            page, head, row = (s[0], s[1], s[2]) if not self.page_size else (s[0], s[2], s[1])
            setattr(p, f"{name}_page_stride", page)
            setattr(p, f"{name}_head_stride", head)
            setattr(p, f"{name}_row_stride", row)
        p.table_stride = self.block_table.stride(0) if self.block_table is not None else 0
        p.batch, p.heads, p.kv_heads, p.group, p.seqlen_q = b, h, self.kv_heads, h // self.kv_heads, nq
        p.seqlen_k = self.seqlen_k
        p.page_shift = int(math.log2(self.page_size)) if self.page_size else 31
        p.causal = int(self.causal)
        p.num_splits = self.splits
        p.scale_log2 = self.scale * math.log2(math.e)
        return p


def smem_bytes(variant: Variant, entry: str) -> int:
    """decode::Config::kSmemBytes: the Q tile and `stages` (K, V) tile pairs; the combine uses none."""
    if entry == "combine":
        return 0
    t, d = variant.tiling, variant.headdim
    return smem_tile_bytes(t.block_m, d) + t.stages * 2 * smem_tile_bytes(t.block_n, d)


def default(headdim: int, limits=None) -> Tiling:
    return TILES.get(headdim, TILES[128])


def run(kernels, variant: Variant, call: DecodeCall) -> None:
    import torch

    b, h, nq, d = call.q.shape
    t = variant.tiling
    rows = nq * (h // call.kv_heads)
    row_blocks = cdiv(rows, t.block_m)
    ws_o = ws_lse = None
    if call.splits > 1:
        ws_o = torch.empty((b, h, call.splits * nq, d), dtype=torch.float32, device=call.q.device)
        ws_lse = torch.empty((b, h, call.splits * nq), dtype=torch.float32, device=call.q.device)
    params = call.params(ws_o, ws_lse)
    params.row_blocks = row_blocks
    kernels.launch("fwd", (call.splits, row_blocks, b * call.kv_heads), t.threads, smem_bytes(variant, "fwd"),
                   params)
    if call.splits > 1:
        kernels.launch("combine", (cdiv(nq, combine_rows(d)), h, b), 128, 0, params)


def _attention(q, k, v, **kwargs):
    """attention(algo="decode"): a dense cache (B, Hkv, Nk, D) through kernels.decode."""
    from .decode_api import decode

    return decode(q, k, v, **kwargs)


def _launched_splits(q, k) -> int:
    from .decode_api import decode_splits

    return decode_splits(q, k)


FAMILY = register(
    KernelFamily(
        algo="decode",
        source="decode.cu",
        macro="FLASHSIM_DECODE",
        entries=("fwd", "combine"),
        variants=tuple(Variant(d, dtype, t) for d, t in TILES.items() for dtype in DTYPES),
        smem_bytes=smem_bytes,
        default_tiling=default,
        run=run,
        summary="Decode: split-KV over packed GQA rows, dense or paged K/V cache, combine kernel",
        attention=_attention,
        launched_splits=_launched_splits,
    )
)
