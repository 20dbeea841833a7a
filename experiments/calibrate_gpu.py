"""The GPU side shared by `calibrate` and `validate`: finding the device, provenance, and the microbenchmark
cubins (built by kernels/build.py's one nvcc path, loaded as cupy.RawModule).

Nothing here imports cupy or torch at module import time: the CLI loads every command module on machines
without a GPU, where these commands must fail with one line instead.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from flashsim.errors import FlashsimError
from flashsim.kernels.build import MICROBENCH_DIR, MICROBENCH_TARGETS

ROOT = Path(__file__).resolve().parents[1]

# Each microbenchmark source and the targets it is built for (kernels/build.py owns the list).
SOURCES = MICROBENCH_TARGETS


def arch_for(major: int, minor: int) -> str:
    """The cubin target for a device's compute capability."""
    if major == 9:
        return "sm_90a"
    if major == 8:
        return "sm_80"
    raise FlashsimError(f"no microbenchmark build for compute capability {major}.{minor} (8.x and 9.x are supported)")


def compile_cubin(name: str, arch: str, out_dir: Path | None = None, force: bool = False) -> Path:
    """kernels/microbench/<name>.cu -> its cubin in the kernels' build directory (kernels.build.compile_source;
    out_dir overrides that directory), rebuilt only when a source changed."""
    from flashsim.kernels.build import compile_source

    if name not in SOURCES:
        raise FlashsimError(f"unknown microbenchmark source {name!r}; known: {', '.join(SOURCES)}")
    if arch not in SOURCES[name]:
        raise FlashsimError(f"{name}.cu is not built for {arch} (targets: {', '.join(SOURCES[name])})")
    return compile_source(MICROBENCH_DIR / f"{name}.cu", arch, out_dir, force)


@dataclass(frozen=True)
class Gpu:
    """The device under test, as read from the CUDA runtime."""

    name: str
    major: int
    minor: int
    sm_count: int
    l2_bytes: int
    smem_per_sm_bytes: int
    smem_per_block_optin_bytes: int
    registers_per_sm: int
    total_mem_bytes: int

    @property
    def arch(self) -> str:
        return arch_for(self.major, self.minor)

    @property
    def hopper(self) -> bool:
        return self.major == 9


def require_gpu(what: str):
    """cupy with a visible CUDA device, or a FlashsimError naming what is missing."""
    try:
        import cupy as cp
    except ImportError:
        raise FlashsimError(
            f"{what} needs a CUDA GPU and cupy, which is not installed: pip install 'flashsim[gpu]' (cupy-cuda12x)"
        ) from None
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # cupy raises CUDARuntimeError (or a driver error) when no driver or device
        raise FlashsimError(f"{what} needs a CUDA GPU; none is visible ({_short(exc)})") from None
    if count < 1:
        raise FlashsimError(f"{what} needs a CUDA GPU; none is visible")
    return cp


# cudaDeviceProp field -> the equivalent cudaDeviceAttr name in cupy's Device.attributes (the fallback).
_PROPS = {
    "multiProcessorCount": "MultiProcessorCount",
    "l2CacheSize": "L2CacheSize",
    "sharedMemPerMultiprocessor": "MaxSharedMemoryPerMultiprocessor",
    "sharedMemPerBlockOptin": "MaxSharedMemoryPerBlockOptin",
    "regsPerMultiprocessor": "MaxRegistersPerMultiprocessor",
    "major": "ComputeCapabilityMajor",
    "minor": "ComputeCapabilityMinor",
}


def read_gpu(cp) -> Gpu:
    device = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(device.id)
    attrs = device.attributes

    def get(key: str) -> int:
        value = props.get(key)
        return int(value if value is not None else attrs[_PROPS[key]])

    name = props.get("name", b"unknown GPU")
    return Gpu(
        name=name.decode() if isinstance(name, bytes) else str(name),
        major=get("major"),
        minor=get("minor"),
        sm_count=get("multiProcessorCount"),
        l2_bytes=get("l2CacheSize"),
        smem_per_sm_bytes=get("sharedMemPerMultiprocessor"),
        smem_per_block_optin_bytes=get("sharedMemPerBlockOptin"),
        registers_per_sm=get("regsPerMultiprocessor"),
        total_mem_bytes=int(props.get("totalGlobalMem") or cp.cuda.runtime.memGetInfo()[1]),
    )


def load_module(cp, name: str, arch: str):
    """The cubin of one microbenchmark source as a cupy.RawModule."""
    return cp.RawModule(path=str(compile_cubin(name, arch)))


def tensor_map_bench(name: str):
    """(cupy, the GPU, the kernel `name` of the microbenchmark source of that name loaded through the driver, whose
    launches take tensor maps by value, and validate's write flush); a FlashsimError without a Hopper GPU."""
    from flashsim.kernels import driver

    from .validate import make_flush

    cp = require_gpu(name)
    gpu = read_gpu(cp)
    if not gpu.hopper:
        raise FlashsimError(f"{name} needs a Hopper GPU (tensor-map copies)")
    fn = driver.load_module(cp.cuda.Device().id, compile_cubin(name, gpu.arch)).function(name)
    return cp, gpu, fn, make_flush(cp, gpu)


def tensor_map_main(argv, name: str, doc: str, run) -> int:
    """The command line of a tensor-map microbenchmark (`python3 -m flashsim.experiments.<name> [--out FILE]`):
    rows = run(cp, gpu, kernel, flush) on the GPU, written with their provenance; exit 2 without a Hopper GPU."""
    import argparse

    ap = argparse.ArgumentParser(prog=f"python3 -m flashsim.experiments.{name}", description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=f"experiments/results/h200/{name.replace('_', '-')}.json")
    args = ap.parse_args(argv)
    try:
        cp, gpu, fn, flush = tensor_map_bench(name)
    except FlashsimError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    write_rows(args.out, cp, gpu, name, run(cp, gpu, fn, flush))
    return 0


def driver_version() -> str:
    """The display driver's version (e.g. 580.159.04) from nvidia-smi, or 'unknown'."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown"
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.strip().splitlines()[0] if out.strip() else "unknown"


def provenance(cp, gpu: Gpu, command: list[str]) -> dict:
    """GPU, driver, CUDA, library versions, date and the command line: recorded in every results file."""
    runtime = cp.cuda.runtime.runtimeGetVersion()
    info = {
        "gpu": gpu.name,
        "compute_capability": f"{gpu.major}.{gpu.minor}",
        "sm_count": gpu.sm_count,
        "driver": driver_version(),
        "cuda_runtime": f"{runtime // 1000}.{runtime % 1000 // 10}",
        "cupy": cp.__version__,
        "python": platform.python_version(),
        "date": today(),
        "command": command_line(command),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
    except ImportError:
        info["torch"] = None
    nvcc = shutil.which("nvcc")
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
        info["nvcc"] = next((ln.split("release")[-1].split(",")[0].strip() for ln in out if "release" in ln), None)
    return info


def today() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")


def command_line(argv: list[str]) -> str:
    """`flashsim <args>` with paths shown relative to the working directory (no machine paths in results)."""
    cwd = Path.cwd()
    parts = []
    for arg in argv:
        if os.sep in arg and Path(arg).is_absolute():
            try:
                arg = str(Path(arg).relative_to(cwd))
            except ValueError:
                arg = Path(arg).name
        parts.append(arg)
    return " ".join(["flashsim", *parts])


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]


def argv_tail() -> list[str]:
    """The arguments after the program name, for provenance."""
    return sys.argv[1:]


def write_rows(path: str | Path, cp, gpu: Gpu, name: str, rows: list[dict]) -> None:
    """A microbenchmark's rows and their provenance (its module, flashsim.experiments.`name`, and the arguments it
    ran with) as one JSON file."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    prov = provenance(cp, gpu, argv_tail())
    prov["command"] = prov["command"].replace("flashsim", f"python3 -m flashsim.experiments.{name}", 1)
    out.write_text(json.dumps({"provenance": prov, "rows": rows}, indent=1) + "\n")
