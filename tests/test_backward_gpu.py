"""FlashAttention-2's backward kernels (kernels.attention_backward) against fp64 autograd, on the GPU
(skipped without one).

Reference: autograd in fp64 of attention with an explicit bottom-right causal mask (query i sees keys
j <= i + Nk - Nq; GQA by repeating K/V heads, so dK and dV sum their group). Error bound, FlashAttention's
own test criterion: max|ours - ref| <= 2 max|lowprec - ref| + atol per gradient, where lowprec is the same
autograd run in the input dtype (what an unfused PyTorch training step computes), so the kernels may be at
most twice as far from the exact gradient as PyTorch at the same precision. atol is one ulp of the dtype at
the reference's largest magnitude: on tiny shapes lowprec can be exact by luck, and the kernels round dS and
P to the dtype (as FA2 does) where lowprec may not.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from flashsim.kernels import attention, attention_backward, flash_attention  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# (Nq, Nk): square, odd lengths both ways, a single query row, ragged tails in both block sizes.
LENGTHS = [(256, 256), (113, 203), (203, 113), (1, 77), (300, 300)]


def explicit_attention(q, k, v, causal, scale):
    """softmax(scale q k^T + mask) v with the mask built explicitly; a row that sees no key outputs 0."""
    h, hkv = q.shape[1], k.shape[1]
    k, v = (t.repeat_interleave(h // hkv, dim=1) for t in (k, v))
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        nq, nk = s.shape[-2:]
        i = torch.arange(nq, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        hidden = j > i + (nk - nq)
        s = s.masked_fill(hidden, float("-inf"))
        empty = hidden.all(dim=-1, keepdim=True)
        s = s.masked_fill(empty, 0.0)  # finite, so softmax has no NaN; its output is zeroed below
        return (torch.softmax(s, dim=-1) @ v).masked_fill(empty, 0.0)
    return torch.softmax(s, dim=-1) @ v


def grads(q, k, v, dout, causal, scale, dtype):
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    out = explicit_attention(*leaves, causal, scale)
    return torch.autograd.grad(out, leaves, dout.to(dtype))


def inputs(b, h, hkv, nq, nk, d, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, h, nq, d, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(b, hkv, nk, d, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(b, hkv, nk, d, device="cuda", dtype=dtype, generator=gen)
    dout = torch.randn(b, h, nq, d, device="cuda", dtype=dtype, generator=gen)
    return q, k, v, dout


def check(ours, exact, lowprec, dtype, label):
    for name, a, ref, low in zip(("dq", "dk", "dv"), ours, exact, lowprec, strict=True):
        assert a.shape == ref.shape and a.dtype == dtype, (label, name)
        assert torch.isfinite(a).all(), (label, name)
        err = (a.double() - ref).abs().max().item()
        low_err = (low.double() - ref).abs().max().item()
        atol = torch.finfo(dtype).eps * ref.abs().max().item()
        assert err <= 2 * low_err + atol, f"{label} {name}: error {err:.3g}, PyTorch at {dtype} {low_err:.3g}"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("nq,nk", LENGTHS)
def test_gradients_match_fp64_autograd(dtype, d, causal, group, nq, nk):
    dt = DTYPES[dtype]
    q, k, v, dout = inputs(2, 4, 4 // group, nq, nk, d, dt)
    scale = d**-0.5
    out, lse = attention(q, k, v, algo="v2", causal=causal, return_lse=True)
    ours = attention_backward(q, k, v, out, lse, dout, causal=causal)
    exact = grads(q, k, v, dout, causal, scale, torch.float64)
    lowprec = grads(q, k, v, dout, causal, scale, dt)
    check(ours, exact, lowprec, dt, f"{dtype} d{d} causal={causal} group={group} {nq}x{nk}")


def test_softmax_scale_and_autograd_function():
    """A non-default scale reaches dS's scaling, and flash_attention's autograd gives the same gradients."""
    dt = torch.bfloat16
    q, k, v, dout = inputs(1, 2, 2, 190, 260, 64, dt, seed=1)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash_attention(*leaves, causal=True, softmax_scale=0.3)
    ours = torch.autograd.grad(out, leaves, dout)
    exact = grads(q, k, v, dout, True, 0.3, torch.float64)
    lowprec = grads(q, k, v, dout, True, 0.3, dt)
    check(ours, exact, lowprec, dt, "scale 0.3 via flash_attention")


def test_bad_lse_is_refused():
    from flashsim.errors import FlashsimError

    q, k, v, dout = inputs(1, 2, 2, 64, 64, 64, torch.float16)
    out, lse = attention(q, k, v, return_lse=True)
    with pytest.raises(FlashsimError, match="lse"):
        attention_backward(q, k, v, out, lse[:, :, :32], dout)
    with pytest.raises(FlashsimError, match="backward"):
        attention(q, k, v, algo="v2-bwd")
