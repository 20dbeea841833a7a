"""Host side of the Hopper kernels (v3.cu, v3_fp8.cu): build, TMA tensor maps, launch.

The CUDA driver API is called through ctypes (libcuda), on the context and stream PyTorch is using, so no
PyTorch C++ extension is built. Tensors are (B, H, N, d) with the last dimension contiguous, as in SDPA.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from flashsim.errors import FlashsimError

KERNEL_DIR = Path(__file__).resolve().parent
BUILD_DIR = KERNEL_DIR.parent / "build" / "hopper"
SOURCES = {"v3": "v3.cu", "v3-fp8": "v3_fp8.cu"}
NVCC_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-O3", "-std=c++17", "-Xptxas", "-v")

# Schedules compiled into the cubins: name -> (ping-pong, intra-warpgroup overlap).
SCHEDULES = {"pingpong": (1, 1), "overlap": (0, 1), "serial": (0, 0)}
# (dtype tag, d, block_m, block_n, causal, schedule) of every entry point v3.cu and v3_fp8.cu define.
ENTRIES = frozenset(
    [(tag, 128, 128, 176, 0, "pingpong") for tag in ("Bf16", "Fp16")]
    + [(tag, 128, 128, 128, c, "pingpong") for tag in ("Bf16", "Fp16") for c in (0, 1)]
    + [(tag, 64, bm, 128, c, "pingpong") for tag in ("Bf16", "Fp16") for bm in (128, 192) for c in (0, 1)]
    + [
        ("Bf16", 128, 128, 176, 0, "overlap"),
        ("Bf16", 128, 128, 176, 0, "serial"),
        ("Bf16", 128, 128, 128, 1, "serial"),
        ("Bf16", 64, 192, 128, 0, "serial"),
        ("E4m3", 128, 128, 224, 0, "pingpong"),
        ("E4m3", 128, 128, 224, 1, "pingpong"),
        ("E4m3", 64, 192, 160, 0, "pingpong"),
        ("E4m3", 64, 192, 160, 1, "pingpong"),
        ("E4m3", 128, 128, 192, 0, "pingpong"),
        ("E4m3", 128, 128, 128, 0, "pingpong"),
        ("E4m3", 128, 128, 128, 1, "pingpong"),
    ]
)
# Where FA3's default tile is not built here, the tile used instead (see the header of v3.cu).
SUBSTITUTE = {("v3", 64, False): (192, 128)}
STAGES = 2


def entry_name(tag: str, d: int, bm: int, bn: int, causal: int, schedule: str) -> str:
    pp, ov = SCHEDULES[schedule]
    return f"v3_{tag}_d{d}_m{bm}_n{bn}_s{STAGES}_c{causal}_p{pp}_o{ov}"


def smem_bytes(tag: str, d: int, bm: int, bn: int) -> int:
    """Dynamic shared memory of one thread block, as laid out by v3.cu (Cfg::SMEM)."""
    eb = 1 if tag == "E4m3" else 2
    return bm * d * eb + 2 * STAGES * bn * d * eb + 8 * (2 + 4 * STAGES) + 1024


def build(algo: str, out_dir: Path = BUILD_DIR, nvcc: str | None = None) -> tuple[Path, str]:
    """Compile one source to an sm_90a cubin; returns its path and ptxas's resource report."""
    nvcc = nvcc or shutil.which("nvcc")
    if not nvcc:
        raise FlashsimError("nvcc not found: cannot build the Hopper kernels")
    out_dir.mkdir(parents=True, exist_ok=True)
    src = KERNEL_DIR / SOURCES[algo]
    cubin = out_dir / (src.stem + ".cubin")
    cmd = [nvcc, *NVCC_FLAGS, "-o", str(cubin), str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise FlashsimError(f"nvcc failed on {src.name}:\n{done.stderr}")
    return cubin, done.stderr


# ---- CUDA driver API through ctypes ---------------------------------------------------------------------

_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_TMAP_DTYPE = {"Bf16": 9, "Fp16": 6, "E4m3": 0}  # CU_TENSOR_MAP_DATA_TYPE_{BFLOAT16, FLOAT16, UINT8}
_SWIZZLE = {128: 3, 64: 2, 32: 1}  # CU_TENSOR_MAP_SWIZZLE_{128B, 64B, 32B} by row width in bytes
_L2_PROMOTION_256B = 3


class _Params(ctypes.Structure):
    """Mirror of V3Params in v3.cu."""

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
    ]


class TensorMap:
    """A CUtensorMap (128 bytes, 64-byte aligned) encoded by cuTensorMapEncodeTiled."""

    def __init__(self, driver: _Driver, ptr: int, tag: str, dims, strides_bytes, box) -> None:
        self._buf = ctypes.create_string_buffer(128 + 64)
        self.address = (ctypes.addressof(self._buf) + 63) & ~63
        rank = len(dims)
        elem_bytes = 1 if tag == "E4m3" else 2
        box = list(box) + [1] * (rank - len(box))  # one row of each outer dimension
        for s in strides_bytes:
            if s % 16:
                raise FlashsimError(f"TMA needs 16-byte multiples for tensor strides, got {s} B")
        if ptr % 16:
            raise FlashsimError("TMA needs a 16-byte aligned tensor")
        driver.check(
            driver.lib.cuTensorMapEncodeTiled(
                ctypes.c_void_p(self.address),
                ctypes.c_int(_TMAP_DTYPE[tag]),
                ctypes.c_uint32(rank),
                ctypes.c_void_p(ptr),
                (ctypes.c_uint64 * rank)(*dims),
                (ctypes.c_uint64 * (rank - 1))(*strides_bytes),
                (ctypes.c_uint32 * rank)(*box),
                (ctypes.c_uint32 * rank)(*([1] * rank)),
                ctypes.c_int(0),
                ctypes.c_int(_SWIZZLE[box[0] * elem_bytes]),
                ctypes.c_int(_L2_PROMOTION_256B),
                ctypes.c_int(0),
            ),
            "cuTensorMapEncodeTiled",
        )


class _Driver:
    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise FlashsimError(f"cannot load the CUDA driver (libcuda.so.1): {exc}") from exc
        self.check(self.lib.cuInit(0), "cuInit")
        self._modules: dict[tuple[int, str], ctypes.c_void_p] = {}
        self._functions: dict[tuple[int, str], ctypes.c_void_p] = {}

    def check(self, rc: int, what: str) -> None:
        if rc:
            msg = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(msg))
            text = msg.value.decode() if msg.value else "unknown error"
            raise FlashsimError(f"{what} failed: CUDA error {rc} ({text})")

    def function(self, device: int, algo: str, name: str, smem: int) -> ctypes.c_void_p:
        key = (device, name)
        if key in self._functions:
            return self._functions[key]
        mkey = (device, algo)
        if mkey not in self._modules:
            cubin = BUILD_DIR / (Path(SOURCES[algo]).stem + ".cubin")
            if not cubin.exists():
                build(algo)
            image = cubin.read_bytes()
            module = ctypes.c_void_p()
            self.check(self.lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(image)), "cuModuleLoadData")
            self._modules[mkey] = module
        func = ctypes.c_void_p()
        self.check(
            self.lib.cuModuleGetFunction(ctypes.byref(func), self._modules[mkey], name.encode()),
            f"cuModuleGetFunction({name})",
        )
        self.check(
            self.lib.cuFuncSetAttribute(func, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, ctypes.c_int(smem)),
            "cuFuncSetAttribute",
        )
        self._functions[key] = func
        return func

    def launch(self, func, grid, threads: int, smem: int, stream: int, args: list[int]) -> None:
        params = (ctypes.c_void_p * len(args))(*args)
        self.check(
            self.lib.cuLaunchKernel(
                func,
                *map(ctypes.c_uint, grid),
                ctypes.c_uint(threads),
                ctypes.c_uint(1),
                ctypes.c_uint(1),
                ctypes.c_uint(smem),
                ctypes.c_void_p(stream),
                params,
                None,
            ),
            "cuLaunchKernel",
        )


_DRIVER: _Driver | None = None


def driver() -> _Driver:
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = _Driver()
    return _DRIVER


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


def choose_tile(algo: str, d: int, causal: bool, tiling=None) -> tuple[int, int]:
    """FA3's default tile (algorithms.tiling), or the substitute this build uses, or the caller's tiling."""
    if tiling is not None:
        return tiling.block_m, tiling.block_n
    if (algo, d, causal) in SUBSTITUTE:
        return SUBSTITUTE[(algo, d, causal)]
    from flashsim.algorithms.problem import Problem
    from flashsim.algorithms.tiling import default_tiling

    t = default_tiling(algo, Problem(1, 1, 128, d, causal=causal), None)
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
    schedule="pingpong",
    persistent: bool | None = None,
    sm_count: int = 132,
):
    """The entry point, tile and grid of one call. persistent=None: persistent (one thread block per SM,
    tiles taken round-robin) unless causal, where tile costs differ and the hardware's block scheduler
    balances them better than a static round-robin."""
    bm, bn = choose_tile(algo, d, causal, tiling)
    key = (tag, d, bm, bn, int(causal), schedule)
    if key not in ENTRIES:
        built = sorted(f"d{e[1]} {e[2]}x{e[3]} {'causal' if e[4] else 'full'} {e[5]}" for e in ENTRIES if e[0] == tag)
        raise FlashsimError(
            f"{algo} has no {tag} kernel for d{d} {bm}x{bn} {'causal' if causal else 'non-causal'} {schedule}; "
            f"built: {', '.join(built)}"
        )
    tiles = math.ceil(nq / bm) * h * b
    if persistent is None:
        persistent = not causal
    grid = (min(tiles, sm_count) if persistent else tiles, 1, 1)
    return Launch(entry_name(*key), bm, bn, grid, 128 * (bm // 64 + 1), smem_bytes(tag, d, bm, bn))


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


def _row_map(t, tag: str, box_rows: int) -> TensorMap:
    """(B, H, N, d) tensor as a 4-D tensor map {d, N, H, B}; boxes of one swizzled panel x box_rows rows."""
    eb = t.element_size()
    b, h, n, d = t.shape
    width = panel_bytes(d * eb)
    return TensorMap(
        driver(),
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
):
    """Launch one v3 / v3-fp8 kernel. `vmap_tensor` is V (16-bit) or V^T (fp8, (B, Hkv, d, N_pad))."""
    import torch

    tag = _tag(q.dtype)
    b, h, nq, d = q.shape
    nk = k.shape[2] if nk is None else nk
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    launch = plan(algo, tag, d, causal, b, h, nq, tiling, schedule, persistent, sms)
    tm_q = _row_map(q, tag, launch.block_m)
    tm_k = _row_map(k, tag, launch.block_n)
    if tag == "E4m3":
        _, hkv, _, npad = vmap_tensor.shape
        s = vmap_tensor.stride()
        width = panel_bytes(launch.block_n)  # V^T panels: keys per swizzled row
        tm_v = TensorMap(driver(), vmap_tensor.data_ptr(), tag, [npad, d, hkv, b], [s[2], s[1], s[0]], [width, d])
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
    )
    dev = q.device.index if q.device.index is not None else torch.cuda.current_device()
    drv = driver()
    func = drv.function(dev, algo, launch.name, launch.smem)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    args = [tm_q.address, tm_k.address, tm_v.address, ctypes.addressof(prm)]
    drv.launch(func, launch.grid, launch.threads, launch.smem, stream, args)
    return out


def attention(
    q, k, v, causal: bool = False, tiling=None, schedule: str = "pingpong", out=None, scale=None, persistent=None
):
    """FlashAttention-3 forward (bf16 / fp16). q: (B, H, N, d); k, v: (B, Hkv, Nk, d). Returns (B, H, N, d)."""
    import torch

    _check_inputs(q, k, v)
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise FlashsimError("q, k, v must share one dtype")
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    return run("v3", q, k, v, causal, tiling, schedule, out, scale=scale, persistent=persistent)
