"""What a measured implementation refuses and how it masks: a configuration it refuses (our v3 has no head
dim 96 kernel; cuDNN takes only some shapes) is recorded as skipped with the reason, and a causal Nq != Nk
call is checked against, and simulated with, the causal alignment it uses.

Causal masks differ only when Nq != Nk: top-left (torch SDPA's is_causal: query i sees keys j <= i) or
bottom-right (FlashAttention >= 2.1 and our kernels: query i sees keys j <= i + Nk - Nq).
"""

from __future__ import annotations

DEFAULT_ALIGN = "bottom-right"  # the simulator's alignment when a problem names none
# by Impl.kind: our kernels align bottom-right; every SDPA backend follows is_causal's top-left
CAUSAL_ALIGN = {"ours": "bottom-right", "sdpa": "top-left"}
SKIPPED = "skipped"  # the status of a configuration an implementation refuses


def causal_align(impl, cfg=None) -> str:
    """The mask impl runs on cfg: its kind's, except on the decode set, where SDPA is handed an explicit
    bottom-right mask (the new tokens are the cache's last ones; top-left would hide the cache from them)."""
    if cfg is not None and cfg.is_decode:
        return "bottom-right"
    return CAUSAL_ALIGN[impl.kind]


def alignment_matters(cfg) -> bool:
    return cfg.causal and cfg.seqlen_q != cfg.nk


def is_refusal(exc: BaseException) -> bool:
    """A call that refused its inputs before launching anything: our kernels raise FlashsimError for what they
    are not built for (a head dim, a dtype); SDPA with one backend selected raises "No available kernel"."""
    from flashsim.errors import FlashsimError

    return isinstance(exc, FlashsimError) or (isinstance(exc, RuntimeError) and "No available kernel" in str(exc))


def reference(q, k, v, cfg, align: str):
    """SDPA's output with the given causal alignment, to check a kernel computes attention. Bottom-right
    goes through torch's lower-right causal bias (memory-efficient attention, K/V heads repeated for GQA)."""
    from . import validate

    if align == "top-left" or not alignment_matters(cfg):
        return validate._reference(q, k, v, cfg)
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    group = cfg.heads // cfg.hkv
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    try:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(cfg.seqlen_q, cfg.nk))
    except RuntimeError:
        return None  # no reference: the kernel is timed without the check
