"""Reference CUDA kernels for standard attention, FlashAttention V1 and V2 (forward), callable from PyTorch.

kernels.attention(q, k, v, algo="v2", causal=False, tiling=None, softmax_scale=None) runs them; the
`flashsim kernels build` command compiles them with nvcc; registry.py says how to add an algorithm.
"""

from .api import attention, available
from .decode_api import decode

__all__ = ["attention", "available", "decode"]
