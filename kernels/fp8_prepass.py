"""Host side of v3-fp8's fused quantisation pre-pass (kernels/fp8_prepass.cuh, built into the v3-fp8 cubin).

One launch turns 16-bit Q, K, V (B, H, N, d) into the inputs of v3_fp8.cu: e4m3 Q and K, e4m3 V^T
(B, Hkv, d, N_pad) with keys permuted inside groups of 16, and fp32 block scales. Its torch reference is
hopper_fp8.prepare_reference; the two agree bit for bit (tests/test_hopper.py).
"""

from __future__ import annotations

import ctypes
import functools
import math

from flashsim.errors import FlashsimError

THREADS = 256  # fp8_prepass::THREADS
CLUSTERS = (2, 4, 8)  # the entry points' thread blocks per quantisation block
CLUSTER = 2  # the default: fastest on the H200 (kernel time, d64 and d128; bench_hopper prepass per size)
CHUNKS = (1, 2, 4, 8)  # the entry points' chunks of 8 elements per thread
HEADDIMS = range(64, 257, 8)  # d / 8 threads share a row; 16-byte loads
MAX_BLOCK_ROWS = 256  # 16 groups of 16 rows: at most 2 per thread block of the cluster


class _Params(ctypes.Structure):
    """Mirror of fp8_prepass::Params in fp8_prepass.cuh."""

    _fields_ = [
        ("x", ctypes.c_void_p * 3),
        ("xq", ctypes.c_void_p * 2),
        ("vt", ctypes.c_void_p),
        ("scale", ctypes.c_void_p * 3),
        ("stride", (ctypes.c_longlong * 3) * 3),
        ("signs", ctypes.c_ulonglong * 4),
        ("batch", ctypes.c_int),
        ("heads", ctypes.c_int),
        ("kv_heads", ctypes.c_int),
        ("nq", ctypes.c_int),
        ("nk", ctypes.c_int),
        ("d", ctypes.c_int),
        ("block_m", ctypes.c_int),
        ("block_n", ctypes.c_int),
        ("hadamard", ctypes.c_int),
        ("hadamard_scale", ctypes.c_float),
        ("npad", ctypes.c_int),
        ("hadamard_order", ctypes.c_int),
    ]


def chunks_per_thread(block_m: int, block_n: int, d: int, cluster: int = CLUSTER) -> int | None:
    """The least entry point's chunks per thread that hold one thread block's rows (the 16-row groups of
    the larger block dealt over the cluster), or None if blocks are not whole groups of at most 256 rows."""
    if block_m % 16 or block_n % 16 or max(block_m, block_n) > MAX_BLOCK_ROWS:
        return None
    rows = 16 * math.ceil(max(block_m, block_n) // 16 / cluster)
    need = math.ceil(rows * d / (8 * THREADS))
    return next((c for c in CHUNKS if c >= need), None)


def serves(q, k, v, block_m: int, block_n: int) -> bool:
    """Whether the kernel takes this call: one 16-bit dtype, a head dim it tiles, rows 16-byte aligned,
    blocks of whole 16-row groups (at most 256 rows)."""
    import torch

    d = q.shape[-1]
    if q.dtype not in (torch.bfloat16, torch.float16) or not (q.dtype == k.dtype == v.dtype):
        return False
    if d not in HEADDIMS or chunks_per_thread(block_m, block_n, d, max(CLUSTERS)) is None:
        return False
    return all(t.data_ptr() % 16 == 0 and all(s % 8 == 0 for s in t.stride()[:3]) for t in (q, k, v))


@functools.cache
def _sign_bits(d: int, seed: int) -> tuple[int, int, int, int]:
    """The incoherent processing's diagonal as bits (bit c set: column c is negated), four 64-bit words."""
    from .hopper_fp8 import signs

    bits = sum(1 << c for c, s in enumerate(signs(d, seed).tolist()) if s < 0)
    return tuple((bits >> (64 * w)) & (2**64 - 1) for w in range(4))


def quantize(
    q, k, v, block_m: int, block_n: int, incoherent_processing: bool = True, seed: int = 0, cluster: int = CLUSTER
):
    """The pre-pass in one launch: returns (qq, kq, vt, q_scale, k_scale, v_scale) as prepare_reference.
    cluster: thread blocks per quantisation block (2, 4 or 8)."""
    import torch

    from . import hopper

    if cluster not in CLUSTERS:
        raise FlashsimError(f"the fp8 pre-pass runs clusters of {', '.join(map(str, CLUSTERS))}, not {cluster}")
    if not serves(q, k, v, block_m, block_n) or chunks_per_thread(block_m, block_n, q.shape[-1], cluster) is None:
        raise FlashsimError(
            "the fused fp8 pre-pass takes bf16/fp16 q, k, v with head dims 64..256 (multiples of 8), 16-byte "
            "aligned rows and blocks of 16-row groups (at most 256 rows); use hopper_fp8.prepare_reference"
        )
    b, h, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    q_blocks, kv_blocks = math.ceil(nq / block_m), math.ceil(nk / block_n)
    npad = kv_blocks * block_n
    dev = q.device
    qq = torch.empty((b, h, nq, d), dtype=torch.float8_e4m3fn, device=dev)
    kq = torch.empty((b, hkv, nk, d), dtype=torch.float8_e4m3fn, device=dev)
    vt = torch.empty((b, hkv, d, npad), dtype=torch.float8_e4m3fn, device=dev)
    qs = torch.empty((b, h, q_blocks), dtype=torch.float32, device=dev)
    ks = torch.empty((b, hkv, kv_blocks), dtype=torch.float32, device=dev)
    vs = torch.empty((b, hkv, kv_blocks), dtype=torch.float32, device=dev)
    prm = _Params()
    for i, t in enumerate((q, k, v)):
        prm.x[i] = t.data_ptr()
        for j in range(3):
            prm.stride[i][j] = t.stride(j)
    prm.xq[0], prm.xq[1], prm.vt = qq.data_ptr(), kq.data_ptr(), vt.data_ptr()
    for i, t in enumerate((qs, ks, vs)):
        prm.scale[i] = t.data_ptr()
    if incoherent_processing:
        prm.signs[:] = _sign_bits(d, seed)
    prm.batch, prm.heads, prm.kv_heads, prm.nq, prm.nk, prm.d = b, h, hkv, nq, nk, d
    prm.block_m, prm.block_n, prm.npad = block_m, block_n, npad
    order = d & -d  # the block-diagonal Hadamard's blocks (hopper_fp8.hadamard)
    prm.hadamard, prm.hadamard_scale, prm.hadamard_order = int(incoherent_processing), 1 / math.sqrt(order), order
    grid = cluster * (b * h * q_blocks + 2 * b * hkv * kv_blocks)
    if grid == 0:
        return qq, kq, vt, qs, ks, vs
    tag = "Bf16" if q.dtype == torch.bfloat16 else "Fp16"
    name = f"fp8_prepass_{tag}_k{cluster}_c{chunks_per_thread(block_m, block_n, d, cluster)}"
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    func = hopper.module("v3-fp8", index).function(name)
    stream = torch.cuda.current_stream(dev).cuda_stream
    func.launch((grid, 1, 1), THREADS, 0, stream, prm)
    return qq, kq, vt, qs, ks, vs
