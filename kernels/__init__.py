"""Reference CUDA kernels for standard attention, FlashAttention V1, V2 and V3 (forward) and V2's backward,
callable from PyTorch.

kernels.attention(q, k, v, algo="v2", causal=False, tiling=None, softmax_scale=None) runs the forwards,
kernels.attention_backward(q, k, v, out, lse, dout) FA2's backward; the `flashsim kernels build` command
compiles them with nvcc; registry.py says how to add an algorithm.
"""

from .api import attention, available
from .backward import attention_backward, flash_attention
from .decode_api import decode

__all__ = ["attention", "attention_backward", "available", "decode", "flash_attention"]
