"""Which backend torch.nn.functional.scaled_dot_product_attention picks on a CUDA device.

Encodes the selection in PyTorch's aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (v2.13) and the
SDPA documentation (torch.nn.attention.SDPBackend): backends are tried in priority order and the first whose
constraints hold runs. The default order is flash, efficient, math, cuDNN (aten/src/ATen/Context.h);
`check_prefer_cudnn_attention` moves cuDNN to the front on compute capability 9.x/10.x when the runtime
cuDNN is newer than 9.15 (the cuDNN that PyTorch's CUDA wheels ship), unless TORCH_CUDNN_SDPA_DEPRIORITIZED
is set. Only the dense, mask-free (is_causal or no mask), dropout-free case is modelled.
"""

from __future__ import annotations

HALF = ("fp16", "bf16")


def _flash(major: int, dtype: str, headdim: int) -> str | None:
    if not 8 <= major <= 12:
        return "flash needs compute capability 8.0 to 12.x"
    if dtype not in HALF:
        return "flash takes fp16/bf16 only"
    if headdim > 256 or headdim % 8:
        return "flash needs head dim <= 256 and a multiple of 8"
    return None


def _efficient(major: int, dtype: str, headdim: int) -> str | None:
    if major < 5:
        return "efficient needs compute capability 5.0+"
    if dtype not in (*HALF, "fp32"):
        return "efficient takes fp16/bf16/fp32"
    if headdim % (4 if dtype == "fp32" else 8):
        return "efficient needs an aligned head dim"
    return None


def _cudnn(major: int, dtype: str, headdim: int) -> str | None:
    if major < 8:
        return "cuDNN attention needs compute capability 8.0+"
    if dtype not in HALF:
        return "cuDNN attention takes fp16/bf16 only"
    if headdim > 128 or headdim % 8:
        return "cuDNN attention needs head dim <= 128 and a multiple of 8"
    return None


CHECKS = {"flash": _flash, "efficient": _efficient, "cudnn": _cudnn, "math": lambda *_: None}


def priority(major: int) -> tuple[str, ...]:
    if major in (9, 10):
        return ("cudnn", "flash", "efficient", "math")
    return ("flash", "efficient", "math", "cudnn")


def sdpa_backend(compute_capability: str, dtype: str, headdim: int) -> dict:
    """{'backend': name or None, 'order': the order tried, 'skipped': {backend: why}} for inputs of `dtype`."""
    major = int(compute_capability.split(".")[0])
    skipped = {}
    if dtype == "fp8":
        return {"backend": None, "order": list(priority(major)),
                "skipped": {"all": "SDPA takes fp16/bf16/fp32 inputs; fp8 attention needs FlashAttention-3's kernel"}}
    for name in priority(major):
        why = CHECKS[name](major, dtype, headdim)
        if why is None:
            return {"backend": name, "order": list(priority(major)), "skipped": skipped}
        skipped[name] = why
    return {"backend": None, "order": list(priority(major)), "skipped": skipped}
