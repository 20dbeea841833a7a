"""Host side of the Hopper kernels (v3.cu, v3_fp8.cu): tile choice, TMA tensor maps, launch.

The cubins come from the one build (kernels/build.py, families of kernels/hopper_family.py, `flashsim
kernels build --algo v3 --arch sm_90a`) and are loaded and launched by kernels/driver.py on the context and
stream PyTorch is using. The tiles are the rows of v3_tiles.tsv (kernels/hopper_tiles.py). Tensors are
(B, H, N, d) with the last dimension contiguous, as in SDPA.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

from flashsim.algorithms import tile_order
from flashsim.errors import FlashsimError

from . import build, driver, hopper_tiles, registry

_DTYPES = {"Bf16": "bf16", "Fp16": "fp16", "E4m3": "e4m3"}  # v3.cu's element type name -> table dtype


def smem_bytes(tag: str, d: int, bm: int, bn: int) -> int:
    """Dynamic shared memory of one thread block, as laid out by v3.cu (Cfg::SMEM)."""
    return hopper_tiles.smem_bytes(_DTYPES[tag], d, bm, bn)


class _Params(ctypes.Structure):
    """Mirror of V3Params in v3_params.cuh."""

    _fields_ = [
        ("o", ctypes.c_void_p),
        ("q_scale", ctypes.c_void_p),
        ("k_scale", ctypes.c_void_p),
        ("v_scale", ctypes.c_void_p),
        ("o_stride_b", ctypes.c_longlong),
        ("o_stride_h", ctypes.c_longlong),
        ("o_stride_n", ctypes.c_longlong),
        ("nq", ctypes.c_int),
        ("nk", ctypes.c_int),
        ("heads", ctypes.c_int),
        ("group", ctypes.c_int),
        ("scale_log2", ctypes.c_float),
        ("batch", ctypes.c_int),
        ("section", ctypes.c_int),
        ("tile_counter", ctypes.c_void_p),
    ]


_modules: dict[tuple[str, int, str], driver.Module] = {}
_counters: dict[tuple[int, int], object] = {}


def tile_counter(device, stream: int):
    """Two zeroed int32 per (device, stream) for counted kernels; each launch leaves them zero again, and
    launches on one stream run one after another, so they never share it."""
    import torch

    key = (device.index, stream)
    if key not in _counters:
        _counters[key] = torch.zeros(2, dtype=torch.int32, device=device)
    return _counters[key]


def module(algo: str, device: int) -> driver.Module:
    """The sm_90a cubin of `algo` on `device`, built first when the build directory has none current."""
    key = (algo, device, str(build.build_dir()))
    if key not in _modules:
        _modules[key] = driver.load_module(device, build.ensure_built(registry.family(algo), "sm_90a"))
    return _modules[key]


# ---- launch ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """What one call runs: the entry point, its tile and its grid."""

    name: str
    block_m: int
    block_n: int
    grid: tuple[int, int, int]
    threads: int
    smem: int
    counted: bool = False  # tiles taken from the grid's counter (two Q buffers, persistent grid)


def choose_tile(algo: str, d: int, causal: bool, tiling=None) -> tuple[int, int]:
    """The caller's tiling, else the default row of the tile table (v3_tiles.tsv)."""
    if tiling is not None:
        return tiling.block_m, tiling.block_n
    t = hopper_tiles.default_tile(algo, d, causal)
    return t.block_m, t.block_n


def plan(
    algo: str,
    tag: str,
    d: int,
    causal: bool,
    b: int,
    h: int,
    nq: int,
    tiling=None,
    schedule: str | None = None,
    persistent: bool | None = None,
    sm_count: int = 132,
    nk: int | None = None,
    counted: bool | None = None,
):
    """The entry point, tile and grid of one call. persistent=None: algorithms.tile_order.persistent (one
    thread block per SM taking tiles in order, unless causal with long heads: one block per tile).
    counted: a persistent block takes its next tile from a counter (the tile a new block would get) rather
    than every grid-th; only two-Q-buffer kernels (schedule pingpong-q2) can, and None means they do.
    schedule None: ping-pong, with two Q buffers where algorithms.tile_order.prefetch says so and the table
    has that kernel for the dtype."""
    bm, bn = choose_tile(algo, d, causal, tiling)
    if schedule is None:
        schedule = "pingpong"
        eb = 1 if tag == "E4m3" else 2
        if tile_order.prefetch(causal, nq if nk is None else nk, d, eb, bm, bn) and any(
            (t.dtype, t.headdim, t.block_m, t.block_n, t.causal, t.schedule)
            == (_DTYPES[tag], d, bm, bn, causal, "pingpong-q2")
            for t in hopper_tiles.tiles(algo)
        ):
            schedule = "pingpong-q2"
    if schedule not in hopper_tiles.SCHEDULES:
        raise FlashsimError(f"unknown schedule {schedule!r}; choose {', '.join(hopper_tiles.SCHEDULES)}")
    row = hopper_tiles.find(algo, _DTYPES[tag], d, bm, bn, causal, schedule)
    if counted and row.q_buffers < 2:
        raise FlashsimError(f"tiles from a counter need a two-Q-buffer kernel (schedule pingpong-q2), not {schedule}")
    tiles = math.ceil(nq / bm) * h * b
    if persistent is None:
        persistent = row.q_buffers > 1 or tile_order.persistent(
            causal, nq if nk is None else nk, d, 1 if tag == "E4m3" else 2, bm
        )
    grid = (min(tiles, sm_count) if persistent else tiles, 1, 1)
    counted = row.q_buffers > 1 and persistent and tiles > grid[0] and counted is not False
    return Launch(row.kernel, bm, bn, grid, 128 * (bm // 64 + 1), row.smem, counted)


def _tag(dtype) -> str:
    import torch

    tags = {torch.bfloat16: "Bf16", torch.float16: "Fp16", torch.float8_e4m3fn: "E4m3"}
    if dtype not in tags:
        raise FlashsimError(f"v3 takes bf16, fp16 (or e4m3 through v3-fp8), got {dtype}")
    return tags[dtype]


def _check_inputs(q, k, v) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise FlashsimError("q, k, v must be (B, H, N, d)")
    if not (q.is_cuda and k.is_cuda and v.is_cuda):
        raise FlashsimError("q, k, v must be CUDA tensors")
    b, h, _, d = q.shape
    if k.shape[0] != b or k.shape[3] != d or v.shape[:2] != k.shape[:2] or h % k.shape[1]:
        raise FlashsimError(f"shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1:
            raise FlashsimError(f"{name} must be contiguous in its last dimension")


def panel_bytes(rows_bytes: int) -> int:
    """Width of the swizzled shared-memory panels a row of `rows_bytes` is cut into (v3.cu's QK_W / V_W)."""
    return next(w for w in (128, 64, 32) if rows_bytes % w == 0)


def _tensor_map(ptr: int, tag: str, dims, strides_bytes, box) -> driver.TensorMap:
    return driver.TensorMap(ptr, 1 if tag == "E4m3" else 2, tag == "Bf16", dims, strides_bytes, box)


def _row_map(t, tag: str, box_rows: int) -> driver.TensorMap:
    """(B, H, N, d) tensor as a 4-D tensor map {d, N, H, B}; boxes of one swizzled panel x box_rows rows."""
    eb = t.element_size()
    b, h, n, d = t.shape
    width = panel_bytes(d * eb)
    return _tensor_map(
        t.data_ptr(),
        tag,
        [d, n, h, b],
        [t.stride(2) * eb, t.stride(1) * eb, t.stride(0) * eb],
        [width // eb, box_rows],
    )


def run(
    algo,
    q,
    k,
    vmap_tensor,
    causal,
    tiling,
    schedule,
    out,
    scales=(None, None, None),
    nk=None,
    scale=None,
    persistent=None,
    section=None,
    counted=None,
):
    """Launch one v3 / v3-fp8 kernel. `vmap_tensor` is V (16-bit) or V^T (fp8, (B, Hkv, d, N_pad)).
    section: the tile order's (batch, head) pairs per section (None: tile_order.section_pairs; 0: head by
    head). counted: see plan()."""
    import torch

    tag = _tag(q.dtype)
    b, h, nq, d = q.shape
    nk = k.shape[2] if nk is None else nk
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    launch = plan(algo, tag, d, causal, b, h, nq, tiling, schedule, persistent, sms, nk, counted)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    tm_q = _row_map(q, tag, launch.block_m)
    tm_k = _row_map(k, tag, launch.block_n)
    if tag == "E4m3":
        _, hkv, _, npad = vmap_tensor.shape
        s = vmap_tensor.stride()
        width = panel_bytes(launch.block_n)  # V^T panels: keys per swizzled row
        tm_v = _tensor_map(vmap_tensor.data_ptr(), tag, [npad, d, hkv, b], [s[2], s[1], s[0]], [width, d])
    else:
        tm_v = _row_map(vmap_tensor, tag, launch.block_n)
    sm_scale = d**-0.5 if scale is None else scale
    prm = _Params(
        out.data_ptr(),
        *(0 if t is None else t.data_ptr() for t in scales),
        out.stride(0),
        out.stride(1),
        out.stride(2),
        nq,
        nk,
        h,
        h // k.shape[1],
        sm_scale * math.log2(math.e),
        b,
        tile_order.section_pairs(causal, nk, d, q.element_size(), h // k.shape[1], b * h)
        if section is None
        else section,
        tile_counter(out.device, stream).data_ptr() if launch.counted else 0,
    )
    dev = q.device.index if q.device.index is not None else torch.cuda.current_device()
    func = module(algo, dev).function(launch.name)
    func.launch(launch.grid, launch.threads, launch.smem, stream, tm_q.address, tm_k.address, tm_v.address, prm)
    return out


def attention(
    q,
    k,
    v,
    causal: bool = False,
    tiling=None,
    schedule: str | None = None,
    out=None,
    scale=None,
    persistent=None,
    section=None,
    counted=None,
):
    """FlashAttention-3 forward (bf16 / fp16). q: (B, H, Nq, d); k, v: (B, Hkv, Nk, d). Returns (B, H, Nq, d).
    causal: bottom-right aligned, query i sees keys j <= i + Nk - Nq; rows that see no key (Nq > Nk) are 0.
    schedule: None picks as plan() does; pingpong-q2 (two Q buffers) runs persistent and takes tiles from a
    counter unless told not to."""
    import torch

    if section is not None and (not isinstance(section, int) or section < 0):
        raise FlashsimError(f"section must be a non-negative int (pairs per section; 0 head by head), got {section!r}")
    _check_inputs(q, k, v)
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise FlashsimError("q, k, v must share one dtype")
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    return run(
        "v3", q, k, v, causal, tiling, schedule, out, scale=scale, persistent=persistent, section=section,
        counted=counted,
    )
