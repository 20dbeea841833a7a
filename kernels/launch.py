"""What a launch description works with: the AttnParams mirror, the checked call, the bound kernels.

AttnParams mirrors struct flashsim::AttnParams of include/common.cuh field for field (pointers, then
64-bit strides, then 32-bit values, so neither side pads); both sides pin its size.
"""

from __future__ import annotations

import ctypes
import functools
import math
from dataclasses import dataclass, field

_P, _I64, _I32, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float
PARAMS_BYTES = 208  # static_assert in include/common.cuh


class AttnParams(ctypes.Structure):
    _fields_ = [
        ("q", _P), ("k", _P), ("v", _P), ("o", _P), ("lse", _P), ("s", _P), ("ws_o", _P), ("ws_ml", _P),
        ("q_batch_stride", _I64), ("q_head_stride", _I64), ("q_row_stride", _I64),
        ("k_batch_stride", _I64), ("k_head_stride", _I64), ("k_row_stride", _I64),
        ("v_batch_stride", _I64), ("v_head_stride", _I64), ("v_row_stride", _I64),
        ("o_batch_stride", _I64), ("o_head_stride", _I64), ("o_row_stride", _I64),
        ("s_row_stride", _I64),
        ("batch", _I32), ("heads", _I32), ("kv_group", _I32), ("seqlen_q", _I32), ("seqlen_k", _I32),
        ("causal", _I32), ("num_splits", _I32),
        ("scale", _F32), ("scale_log2", _F32),
        ("start_stagger_cycles", _I32),  # experiments only: include/common.cuh
    ]  # fmt: skip


assert ctypes.sizeof(AttnParams) == PARAMS_BYTES


@dataclass
class Call:
    """One checked attention call: q (B, H, Nq, D), k and v (B, Hkv, Nk, D), out like q, lse (B, H, Nq)
    fp32; every tensor on one CUDA device with a contiguous last dimension and 16-byte aligned rows.
    `options` holds algorithm-specific keywords (v1: splits)."""

    q: object
    k: object
    v: object
    out: object
    lse: object
    causal: bool
    scale: float
    options: dict = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int, int, int, int, int]:
        """(batch, heads, kv_heads, seqlen_q, seqlen_k, headdim)"""
        b, h, nq, d = self.q.shape
        return b, h, self.k.shape[1], nq, self.k.shape[2], d

    @property
    def sm_count(self) -> int:
        return _sm_count(self.q.device.index)

    def params(self) -> AttnParams:
        """AttnParams with the tensors, shapes, causal flag and scale filled in; workspaces left null."""
        b, h, hkv, nq, nk, _ = self.shape
        p = AttnParams()
        p.q, p.k, p.v, p.o = (t.data_ptr() for t in (self.q, self.k, self.v, self.out))
        p.lse = self.lse.data_ptr()
        for name in ("q", "k", "v", "o"):
            t = self.out if name == "o" else getattr(self, name)
            sb, sh, sr, _ = t.stride()
            setattr(p, f"{name}_batch_stride", sb)
            setattr(p, f"{name}_head_stride", sh)
            setattr(p, f"{name}_row_stride", sr)
        p.batch, p.heads, p.kv_group, p.seqlen_q, p.seqlen_k = b, h, h // hkv, nq, nk
        p.causal = int(self.causal)
        p.num_splits = 1
        p.scale = self.scale
        p.scale_log2 = self.scale * math.log2(math.e)
        return p


@functools.cache
def _sm_count(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


class BoundKernels:
    """The kernels of one variant, loaded on the call's device: launch(entry, grid, threads, smem, params)
    runs NAME_<entry> on torch's current stream."""

    def __init__(self, module, symbol: str, device) -> None:
        self.module, self.symbol, self.device = module, symbol, device

    def launch(self, entry: str, grid: tuple[int, int, int], threads: int, smem: int, params: AttnParams) -> None:
        import torch

        if min(grid) < 1:
            return  # nothing to do (an empty dimension); a zero grid is an error to the driver
        stream = torch.cuda.current_stream(self.device).cuda_stream
        self.module.function(f"{self.symbol}_{entry}").launch(grid, threads, smem, stream, params)

    def registers(self, entry: str) -> int:
        """Registers per thread of NAME_<entry>, as the driver loaded it."""
        return self.module.function(f"{self.symbol}_{entry}").registers


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def smem_tile_bytes(rows: int, cols: int) -> int:
    """Bytes of a SmemTile<rows, cols> of 16-bit elements (include/common.cuh): widths that are a multiple
    of 64 are swizzled, others padded by one 16-byte chunk per row."""
    stride = cols if cols % 64 == 0 else cols + 8
    return rows * stride * 2


def device_limits(device) -> object | None:
    """The shared-memory fields algorithms.tiling reads from a profile, taken from the device (None: no GPU)."""
    if device is None:
        return None
    import torch

    props = torch.cuda.get_device_properties(device)
    from types import SimpleNamespace

    return SimpleNamespace(
        smem_per_block_max_bytes=props.shared_memory_per_block_optin,
        smem_per_sm_bytes=props.shared_memory_per_multiprocessor,
    )
