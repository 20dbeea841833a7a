"""The CUDA driver API through ctypes: load a cubin, look up its kernels, launch them on a torch stream,
encode TMA tensor maps (the Hopper kernels). Every kernel of the package is loaded and launched here.

libcuda ships with every NVIDIA driver, so launching needs no PyTorch C++ extension (no ABI to match)
and no CUDA Python package. Every call's result is checked; a failure raises KernelError with the
driver's name for it. Modules are cached per (device, cubin), functions per module.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from pathlib import Path

from flashsim.errors import FlashsimError

_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CUfunction_attribute
_NUM_REGS = 4
_DEFAULT_SMEM_LIMIT = 48 * 1024  # dynamic shared memory a launch may use without opting in

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_modules: dict[tuple[int, str, int], Module] = {}


class KernelError(RuntimeError):
    """A CUDA driver call failed (a bug or a broken GPU state, not bad input)."""


def _signatures(lib: ctypes.CDLL) -> None:
    p, u, i = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int
    table = {
        "cuInit": [u],
        "cuCtxGetCurrent": [ctypes.POINTER(p)],
        "cuCtxSetCurrent": [p],
        "cuCtxGetDevice": [ctypes.POINTER(i)],
        "cuDeviceGet": [ctypes.POINTER(i), i],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(p), i],
        "cuModuleLoadData": [ctypes.POINTER(p), p],
        "cuModuleGetFunction": [ctypes.POINTER(p), p, ctypes.c_char_p],
        "cuFuncSetAttribute": [p, i, i],
        "cuFuncGetAttribute": [ctypes.POINTER(i), i, p],
        "cuLaunchKernel": [p, u, u, u, u, u, u, u, p, ctypes.POINTER(p), ctypes.POINTER(p)],
        "cuGetErrorName": [i, ctypes.POINTER(ctypes.c_char_p)],
        "cuGetErrorString": [i, ctypes.POINTER(ctypes.c_char_p)],
        "cuTensorMapEncodeTiled": [
            p,
            i,
            ctypes.c_uint32,
            p,
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_uint32),
            ctypes.POINTER(ctypes.c_uint32),
            i,
            i,
            i,
            i,
        ],
    }
    for name, argtypes in table.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = i


def _cuda() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        for name in ("libcuda.so.1", "libcuda.so"):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        else:
            raise FlashsimError("the CUDA driver library (libcuda.so.1) was not found: the kernels need a GPU driver")
        _signatures(lib)
        _check(lib, lib.cuInit(0), "cuInit")
        _lib = lib
    return _lib


def _check(lib: ctypes.CDLL, result: int, what: str) -> None:
    if result == 0:
        return
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    lib.cuGetErrorName(result, ctypes.byref(name))
    lib.cuGetErrorString(result, ctypes.byref(text))
    label = name.value.decode() if name.value else f"CUresult {result}"
    detail = text.value.decode() if text.value else ""
    raise KernelError(f"{what} failed: {label}: {detail}")


def _make_current(device: int) -> None:
    """Make the device's primary context (the one the CUDA runtime and torch use) current here."""
    lib = _cuda()
    ctx = ctypes.c_void_p()
    _check(lib, lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if ctx.value:
        dev = ctypes.c_int()
        _check(lib, lib.cuCtxGetDevice(ctypes.byref(dev)), "cuCtxGetDevice")
        if dev.value == device:
            return
    dev = ctypes.c_int()
    _check(lib, lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
    _check(lib, lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    _check(lib, lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


class Function:
    """One kernel of a loaded module."""

    def __init__(self, module: Module, name: str, handle: ctypes.c_void_p) -> None:
        self.module, self.name, self.handle = module, name, handle
        self._smem_opt_in = _DEFAULT_SMEM_LIMIT

    @functools.cached_property
    def registers(self) -> int:
        lib, value = _cuda(), ctypes.c_int()
        _check(lib, lib.cuFuncGetAttribute(ctypes.byref(value), _NUM_REGS, self.handle), f"registers of {self.name}")
        return value.value

    def launch(self, grid: tuple[int, int, int], threads: int, smem: int, stream: int, *params) -> None:
        """Launch on `stream` (a CUstream) with by-value arguments `params`: ctypes objects, or the integer
        address of one (a TensorMap's aligned buffer)."""
        lib = _cuda()
        _make_current(self.module.device)
        if smem > self._smem_opt_in:
            _check(
                lib,
                lib.cuFuncSetAttribute(self.handle, _MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
                f"raising the shared-memory limit of {self.name} to {smem} B",
            )
            self._smem_opt_in = smem
        args = (ctypes.c_void_p * len(params))(*(a if isinstance(a, int) else ctypes.addressof(a) for a in params))
        gx, gy, gz = grid
        _check(
            lib,
            lib.cuLaunchKernel(self.handle, gx, gy, gz, threads, 1, 1, smem, ctypes.c_void_p(stream), args, None),
            f"launching {self.name} (grid {grid}, {threads} threads, {smem} B shared)",
        )


class Module:
    """A cubin loaded into one device's primary context."""

    def __init__(self, device: int, image: bytes, label: str) -> None:
        self.device, self.label = device, label
        lib = _cuda()
        _make_current(device)
        buf = ctypes.create_string_buffer(image, len(image))  # the driver copies the image while loading
        handle = ctypes.c_void_p()
        _check(lib, lib.cuModuleLoadData(ctypes.byref(handle), ctypes.cast(buf, ctypes.c_void_p)), f"loading {label}")
        self.handle = handle
        self._functions: dict[str, Function] = {}

    def function(self, name: str) -> Function:
        fn = self._functions.get(name)
        if fn is None:
            lib, handle = _cuda(), ctypes.c_void_p()
            result = lib.cuModuleGetFunction(ctypes.byref(handle), self.handle, name.encode())
            if result != 0:
                raise KernelError(f"kernel {name} is not in {self.label}; rebuild with `flashsim kernels build`")
            fn = self._functions[name] = Function(self, name, handle)
        return fn


def load_module(device: int, path: Path) -> Module:
    """The module of cubin `path` on `device`, loaded once per file version."""
    stat = path.stat()
    key = (device, str(path), stat.st_mtime_ns)
    with _lock:
        module = _modules.get(key)
        if module is None:
            module = _modules[key] = Module(device, path.read_bytes(), path.name)
    return module


_TMAP_DTYPE = {1: 0, 2: 6}  # element bytes -> CU_TENSOR_MAP_DATA_TYPE_{UINT8, FLOAT16}
_TMAP_BF16 = 9
_SWIZZLE = {128: 3, 64: 2, 32: 1}  # CU_TENSOR_MAP_SWIZZLE_{128B, 64B, 32B} by box row width in bytes
_L2_PROMOTION_256B = 3


class TensorMap:
    """A CUtensorMap (128 bytes, 64-byte aligned) from cuTensorMapEncodeTiled; `address` is what a kernel
    parameter of type `const __grid_constant__ CUtensorMap` is launched with."""

    def __init__(self, ptr: int, elem_bytes: int, bf16: bool, dims, strides_bytes, box) -> None:
        self._buf = ctypes.create_string_buffer(128 + 64)
        self.address = (ctypes.addressof(self._buf) + 63) & ~63
        rank = len(dims)
        box = list(box) + [1] * (rank - len(box))  # one row of each outer dimension
        if any(s % 16 for s in strides_bytes):
            raise FlashsimError(f"TMA needs 16-byte multiples for tensor strides, got {list(strides_bytes)} B")
        if ptr % 16:
            raise FlashsimError("TMA needs a 16-byte aligned tensor")
        lib = _cuda()
        _check(
            lib,
            lib.cuTensorMapEncodeTiled(
                ctypes.c_void_p(self.address),
                _TMAP_BF16 if bf16 else _TMAP_DTYPE[elem_bytes],
                rank,
                ctypes.c_void_p(ptr),
                (ctypes.c_uint64 * rank)(*dims),
                (ctypes.c_uint64 * (rank - 1))(*strides_bytes),
                (ctypes.c_uint32 * rank)(*box),
                (ctypes.c_uint32 * rank)(*([1] * rank)),
                0,
                _SWIZZLE[box[0] * elem_bytes],
                _L2_PROMOTION_256B,
                0,
            ),
            "cuTensorMapEncodeTiled",
        )
