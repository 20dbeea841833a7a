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


# What cuDNN's fused forward on Hopper (its `..._sm90_flash_fprop_wgmma_f16_knob_7_{BM}x{BN}x{D}_...` kernels)
# launches, read from the kernel names and launch geometry PyTorch's profiler recorded on every shape of both
# development sets (experiments/results/h200/sdpa-launches-*.json, `experiments/sdpa_launches.py`): a grid of
# at most one block per SM that walks the tiles (persistent), 384 threads (a producer warpgroup and two
# consumers of 64 query rows each), tiles of 128 query and 128 key rows, and kernels compiled for head dims
# 64, 128 and 256 only: a head dim of 96 runs the d128 kernel, so its products and its shared-memory tiles
# are those of d128. Its consumers wait for each GEMM at once and take the row max before the ping-pong turn
# (Tiling pipeline "serial", seen in its SASS: experiments/results/h200/session21/cudnn-sass/ and session52/).
# Validation runs that loop at d256 only: at d64 and d128 it comes out 20-46% slow on the development sets'
# short loops, where FA3's order stands within their errors (docs/MODEL.md, cuDNN as it launches).
CUDNN_SM90_HEADDIMS = (64, 128, 256)
CUDNN_SM90_TILE = {"block_m": 128, "block_n": 128, "warps": 12}


def cudnn_sm90_headdim(headdim: int) -> int:
    """The head dim of the kernel cuDNN runs for `headdim` (the next one it is compiled for)."""
    return next((d for d in CUDNN_SM90_HEADDIMS if d >= headdim), headdim)


def cudnn_sm90_tiling(headdim: int) -> dict:
    """cuDNN's tiles for this head dim as a Tiling dict. Its K/V ring holds 3 stages in 227 KB at d64 and d128
    because the output is staged in Q's buffer; v3's schedule stages it apart, so 3 stages do not fit there:
    the model runs 2, in FA3's order. At d256 its SASS (experiments/results/h200/session50/) shows one K and one
    V buffer, which the model runs in the kernel's own order (pipeline "serial"; session 53's adoption)."""
    if cudnn_sm90_headdim(headdim) > 128:
        return {**CUDNN_SM90_TILE, "stages": 1, "pipeline": "serial"}
    return {**CUDNN_SM90_TILE, "stages": 2}


def fa2_tiling(problem, profile) -> dict:
    """The tiles SDPA's flash backend (FlashAttention-2's forward) launches for this problem: its usual tiles
    (the v2 record's), or, where its split heuristic splits the K/V sequence (too few Q tiles to fill the SMs),
    its split-KV kernel's: 64 query rows, FA2's split block of keys, 4 warps. Seen on the development sets
    (experiments/results/h200/sdpa-launches-*.json): `flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<96, 64,
    128, 4, ...>>` and its combine for B1 H8 N1024 d96, the usual kernel on every other shape."""
    from ..algorithms.splitkv import split_block_n
    from ..algorithms.tiling import resolve_tiling

    t = resolve_tiling("v2", problem, profile, splits="auto")
    if t.splits == 1:
        return t.as_dict()
    return {**t.as_dict(), "block_m": 64, "block_n": split_block_n(problem.headdim), "warps": 4}


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
