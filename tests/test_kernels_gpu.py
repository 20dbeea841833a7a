"""The CUDA kernels against an fp64 reference, on the GPU (skipped without one).

Error bound (FA3's tests): max|out - ref| <= 2 max|sdpa - ref| + atol, where sdpa is torch's own
low-precision attention on the same inputs and atol one ulp of the dtype at the output's scale. Outputs
are NaN-poisoned before each run, so an element the kernel never wrote fails. Causal is bottom-right
aligned (query i sees keys j <= i + Nk - Nq); a row that sees no key must be 0 with a logsumexp of -inf.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from flashsim.algorithms.tiling import Tiling  # noqa: E402
from flashsim.kernels import attention  # noqa: E402

ALGOS = ("standard", "v1", "v2")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def bottom_right_mask(nq, nk, device):
    """True where query i may see key j: j <= i + nk - nq (FlashAttention >= 2.1's causal alignment)."""
    i = torch.arange(nq, device=device)[:, None]
    j = torch.arange(nk, device=device)[None, :]
    return j <= i + (nk - nq)


def reference(q, k, v, causal, scale=None):
    """fp64 attention (causal bottom-right, GQA by repeating K/V heads) and its lse; a row that sees no key
    is 0 with lse -inf."""
    h, hkv = q.shape[1], k.shape[1]
    q, k, v = (t.double() for t in (q, k, v))
    k, v = (t.repeat_interleave(h // hkv, dim=1) for t in (k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~bottom_right_mask(*s.shape[-2:], s.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # -inf for an empty row
    return torch.softmax(s, dim=-1).nan_to_num(0.0) @ v, lse


def torch_lowprec(algo, q, k, v, causal, scale=None):
    """torch's own answer at the input precision with the same roundings as the algorithm: SDPA (a
    fused kernel, fp32 scores) for v1/v2; for standard, scores and probabilities rounded to the dtype
    between unfused steps, as torch's math path does."""
    nq, nk = q.shape[2], k.shape[2]
    if algo != "standard":
        if not causal or nq == nk:  # is_causal is top-left: the same mask only when square
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
            )
        group = q.shape[1] // k.shape[1]
        k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
        mask = bottom_right_mask(nq, nk, q.device)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale).nan_to_num(0.0)
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        s = s.masked_fill(~bottom_right_mask(nq, nk, s.device), float("-inf"))
    return torch.softmax(s.float(), dim=-1).nan_to_num(0.0).to(q.dtype) @ v


def run_checked(algo, q, k, v, causal, tiling=None, scale=None, **kw):
    out = torch.full_like(q, float("nan"))
    got, lse = attention(q, k, v, algo=algo, causal=causal, tiling=tiling, softmax_scale=scale, out=out,
                         return_lse=True, **kw)  # fmt: skip
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr()
    assert not torch.isnan(out).any(), f"{algo}: {int(torch.isnan(out).sum())} output elements unwritten or NaN"
    ref, ref_lse = reference(q, k, v, causal, scale)
    low = torch_lowprec(algo, q, k, v, causal, scale).double()
    err = (out.double() - ref).abs().max().item()
    base = (low - ref).abs().max().item()
    eps = torch.finfo(q.dtype).eps
    atol = 2 * eps * max(ref.abs().max().item(), 1e-3)
    assert err <= 2 * base + atol, f"{algo}: max error {err:.3e} vs torch's {base:.3e} (+{atol:.1e})"
    # Rows that see no key (causal, Nq > Nk): exactly 0, logsumexp -inf.
    empty = torch.isinf(ref_lse)
    assert (out.double()[empty] == 0).all(), f"{algo}: a row that sees no key is not 0"
    assert (lse[empty] == float("-inf")).all(), f"{algo}: a row that sees no key has lse != -inf"
    # v1/v2 keep scores in fp32; standard's logsumexp comes from scores rounded to the dtype.
    seen = ref_lse[~empty]
    lse_tol = (8 * eps if algo == "standard" else 1e-4) * max(1.0, seen.abs().max().item() if seen.numel() else 0.0)
    lse_err = (lse.double()[~empty] - seen).abs().max().item() if seen.numel() else 0.0
    assert lse_err <= lse_tol, f"{algo}: lse error {lse_err:.3e} > {lse_tol:.1e}"
    return out


def randn(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=dtype)


SHAPES = [  # batch, heads, kv_heads, seqlen_q, seqlen_k
    (2, 4, 4, 256, 256),  # whole tiles
    (1, 3, 3, 200, 200),  # ragged: N not a multiple of any tile
    (2, 2, 2, 130, 333),  # seqlen_q != seqlen_k
    (1, 8, 2, 300, 300),  # GQA: 4 query heads per K/V head
    (1, 2, 2, 1, 77),  # one query
    (1, 2, 1, 520, 97),  # seqlen_q > seqlen_k, GQA (causal: the first 423 rows see no key)
    (1, 3, 3, 77, 301),  # odd lengths, seqlen_q < seqlen_k
    (2, 2, 2, 301, 77),  # odd lengths, seqlen_q > seqlen_k: whole query blocks see no key
]


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("nq,nk", [(1, 1), (1, 333), (333, 1), (129, 128), (128, 129), (255, 513), (513, 255)])
def test_causal_is_bottom_right(algo, nq, nk):
    """Causal Nq != Nk against the explicit bottom-right mask; the last query row sees every key."""
    q, k, v = randn(1, 2, nq, 64), randn(1, 2, nk, 64), randn(1, 2, nk, 64)
    out = run_checked(algo, q, k, v, True)
    full = run_checked(algo, q[:, :, -1:], k, v, False)  # the last row alone, no mask: the same answer
    assert torch.equal(out[:, :, -1:], full) or (out[:, :, -1:] - full).abs().max().item() < 1e-2


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128])
def test_random(algo, shape, causal, dtype, d):
    b, h, hkv, nq, nk = shape
    q = randn(b, h, nq, d, dtype=DTYPES[dtype])
    k, v = randn(b, hkv, nk, d, dtype=DTYPES[dtype]), randn(b, hkv, nk, d, dtype=DTYPES[dtype])
    run_checked(algo, q, k, v, causal)


@pytest.mark.parametrize(
    "algo,d",
    [
        ("v2", 32),
        ("v2", 96),
        ("v2", 256),
        ("v1", 32),
        ("v1", 96),
        ("standard", 32),
        ("standard", 96),
        ("standard", 256),
    ],  # fmt: skip
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_other_headdims(algo, d, causal):
    q, k, v = randn(2, 3, 333, d), randn(2, 3, 333, d), randn(2, 3, 333, d)
    run_checked(algo, q, k, v, causal)


@pytest.mark.parametrize("d,tiling", [(64, Tiling(64, 64, 4, 2)), (128, Tiling(64, 64, 4, 2)),
                                      (256, Tiling(128, 64, 8, 2))])  # fmt: skip
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_v2_other_tilings(d, tiling, causal):
    q, k, v = randn(2, 2, 300, d), randn(2, 2, 300, d), randn(2, 2, 300, d)
    run_checked("v2", q, k, v, causal, tiling=tiling)


def structured(kind, b, h, n, d):
    if kind == "ones":
        q = k = v = torch.ones(b, h, n, d, device="cuda", dtype=torch.bfloat16)
        return q, k, v
    if kind == "identity":  # row i of Q and K is 4 e_(i mod d): each query peaks on the keys it matches
        eye = torch.eye(d, device="cuda").repeat(n // d + 1, 1)[:n] * 4
        qk = eye.expand(b, h, n, d).to(torch.bfloat16)
        return qk, qk.clone(), randn(b, h, n, d)

    # outliers (FA3 paper): N(0, 1) + N(0, 100) * Bernoulli(0.001)
    def one():
        x = torch.randn(b, h, n, d, device="cuda")
        spikes = torch.randn(b, h, n, d, device="cuda") * 10 * (torch.rand(b, h, n, d, device="cuda") < 1e-3)
        return (x + spikes).to(torch.bfloat16)

    return one(), one(), one()


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("kind", ["ones", "identity", "outliers"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_structured(algo, kind, d, causal):
    q, k, v = structured(kind, 2, 4, 384, d)
    out = run_checked(algo, q, k, v, causal)
    if kind == "ones" and algo != "standard":  # standard rounds P = 1/n to the dtype before P V
        assert torch.all(out == 1), f"{algo}: uniform attention over ones must give exactly 1"


@pytest.mark.parametrize("algo", ALGOS)
def test_long_sequence_and_scale(algo):
    """Many K/V blocks per Q block, causal, with a custom softmax scale."""
    q, k, v = randn(1, 4, 2048, 128), randn(1, 4, 2048, 128), randn(1, 4, 2048, 128)
    run_checked(algo, q, k, v, True, scale=0.05)


@pytest.mark.parametrize("algo", ALGOS)
def test_strided_inputs(algo):
    """(B, N, H, D) storage seen as (B, H, N, D), as models keep it: no copy needed, same answer."""
    q, k, v = (randn(2, 300, 4, 64).transpose(1, 2) for _ in range(3))
    assert not q.is_contiguous()
    run_checked(algo, q, k, v, True)


def test_v1_paper_grid_matches_split_grid():
    """splits only changes which thread block owns a Q block; each block's arithmetic is the same."""
    q, k, v = randn(2, 4, 1000, 64), randn(2, 4, 1000, 64), randn(2, 4, 1000, 64)
    one = attention(q, k, v, algo="v1", causal=True, splits=1)
    many = attention(q, k, v, algo="v1", causal=True)
    seven = attention(q, k, v, algo="v1", causal=True, splits=7)
    assert torch.equal(one, many) and torch.equal(one, seven)


def test_repeatable():
    """The same inputs give bit-identical outputs (no races, no order dependence)."""
    q, k, v = randn(2, 8, 1024, 128), randn(2, 8, 1024, 128), randn(2, 8, 1024, 128)
    for algo in ALGOS:
        first = attention(q, k, v, algo=algo, causal=True)
        for _ in range(3):
            assert torch.equal(first, attention(q, k, v, algo=algo, causal=True)), algo


def test_default_tiles_are_fa2():
    from flashsim.kernels.launch import device_limits
    from flashsim.kernels.registry import family

    v2 = family("v2")
    limits = device_limits(torch.device("cuda"))
    assert v2.default_tiling(64, limits) == Tiling(128, 128, 4, 2)
    assert v2.default_tiling(128, limits) == Tiling(128, 64, 4, 2)


def test_unsupported_generation_is_refused():
    from flashsim.errors import FlashsimError

    major, minor = torch.cuda.get_device_capability()
    q = randn(1, 1, 16, 64)
    if major < 8:
        with pytest.raises(FlashsimError, match="built for"):
            attention(q, q, q)
    else:
        assert math.isfinite(attention(q, q, q).float().sum().item())
