"""The decode kernel (kernels.decode) against an fp64 reference with an explicit mask, on the GPU.

Dense and paged caches (pages handed out in a shuffled order), GQA groups 1/4/8, 1/4/16 queries, causal
(bottom-right: query i of a sequence of n keys sees keys j <= i + n - Nq) and not, 1 / FA2's / 7 splits,
variable per-sequence lengths (odd ones, and ones shorter than Nq so causal rows see no key), d64 and d128,
fp16 and bf16. Outputs are NaN-poisoned before each run, so an element the kernel never wrote fails.
"""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from flashsim.kernels import attention, decode  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# Relative error (Frobenius) of O against fp64: P is rounded to the input dtype before P V, as in FA2.
TOLERANCE = {"fp16": 4e-3, "bf16": 2.5e-2}
LSE_ATOL = 2e-3


def reference(q, k, v, seqlens, causal):
    """fp64 O and LSE, one sequence at a time over its first seqlens[b] keys; a row that sees no key is 0
    with LSE -inf."""
    b, h, nq, d = q.shape
    group = h // k.shape[1]
    out = torch.zeros(b, h, nq, d, dtype=torch.float64, device=q.device)
    lse = torch.full((b, h, nq), float("-inf"), dtype=torch.float64, device=q.device)
    for i, n in enumerate(seqlens):
        if n == 0:
            continue
        kk, vv = (t[i, :, :n].double().repeat_interleave(group, dim=0) for t in (k, v))
        s = (q[i].double() @ kk.transpose(-1, -2)) * d**-0.5
        if causal:
            rows = torch.arange(nq, device=q.device)[:, None]
            cols = torch.arange(n, device=q.device)[None, :]
            s = s.masked_fill(cols > rows + n - nq, float("-inf"))
        lse[i] = torch.logsumexp(s, dim=-1)
        out[i] = torch.softmax(s, dim=-1).nan_to_num(0.0) @ vv
    return out, lse


def paged_cache(k, seqlens, page_size, seed=0):
    """k (B, Hkv, N, D) in a vLLM page pool (pages, page_size, Hkv, D) with pages in a shuffled order, plus the
    int32 block table (unused entries point at page 0)."""
    b, hkv, n, d = k.shape
    counts = [-(-s // page_size) for s in seqlens]
    order = list(range(sum(counts)))
    random.Random(seed).shuffle(order)
    pool = torch.zeros(max(1, len(order)), page_size, hkv, d, dtype=k.dtype, device=k.device)
    max_pages = max(1, -(-n // page_size))
    table = torch.zeros(b, max_pages, dtype=torch.int32)
    at = 0
    for i, count in enumerate(counts):
        for page in range(count):
            phys = order[at]
            at += 1
            table[i, page] = phys
            rows = k[i, :, page * page_size: (page + 1) * page_size].transpose(0, 1)
            pool[phys, : rows.shape[0]] = rows
    return pool, table.to(k.device)


def make(b, h, hkv, nq, n, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(b, x, m, d, device="cuda", dtype=DTYPES[dtype], generator=g)
               for x, m in ((h, nq), (hkv, n), (hkv, n)))
    return q, k, v


def check(out, lse, ref_out, ref_lse, dtype):
    assert torch.isfinite(out).all(), "an output element is not finite (never written?)"
    err = ((out.double() - ref_out).norm() / ref_out.norm().clamp_min(1e-12)).item()
    assert err < TOLERANCE[dtype], f"relative error {err:.2e}"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite), "LSE is -inf exactly where no key is visible"
    assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() < LSE_ATOL * max(1.0, ref_lse.abs().max())
    assert (out[~finite] == 0).all(), "a row that sees no key is 0"


def run(q, k, v, seqlens, causal, splits, page_size, dtype):
    b = q.shape[0]
    lens = torch.tensor(seqlens, dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    if page_size:
        pool_k, table = paged_cache(k, seqlens, page_size)
        pool_v, _ = paged_cache(v, seqlens, page_size)
        got, lse = decode(q, pool_k, pool_v, cache_seqlens=lens, block_table=table, causal=causal, splits=splits,
                          return_lse=True, out=out)
    else:
        got, lse = decode(q, k, v, cache_seqlens=lens if len(set(seqlens)) > 1 or seqlens[0] != k.shape[2] else None,
                          causal=causal, splits=splits, return_lse=True, out=out)
    assert got.data_ptr() == out.data_ptr() and lse.shape == (b, q.shape[1], q.shape[2])
    ref_out, ref_lse = reference(q, k, v, seqlens, causal)
    check(got, lse, ref_out, ref_lse, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("nq", [1, 4, 16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("splits", [1, None, 7])
def test_dense(dtype, d, group, nq, causal, splits):
    hkv = 2
    q, k, v = make(2, hkv * group, hkv, nq, 1029, d, dtype)
    run(q, k, v, [1029, 1029], causal, splits, 0, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("splits", [1, None, 7])
def test_dense_variable_lengths(dtype, d, causal, splits):
    q, k, v = make(4, 8, 2, 16, 777, d, dtype, seed=1)
    run(q, k, v, [777, 5, 301, 0], causal, splits, 0, dtype)


@pytest.mark.parametrize("page_size", [16, 64, 256])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("nq", [1, 16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("splits", [1, None, 7])
def test_paged(page_size, d, group, nq, causal, splits):
    dtype = "bf16" if (d + group + nq) % 2 else "fp16"
    q, k, v = make(3, 2 * group, 2, nq, 1100, d, dtype, seed=2)
    run(q, k, v, [1100, 13, 517], causal, splits, page_size, dtype)


@pytest.mark.parametrize("page_size", [32])
def test_paged_page_32_long(page_size):
    q, k, v = make(2, 32, 8, 1, 9000, 128, "bf16", seed=3)
    run(q, k, v, [9000, 4097], False, None, page_size, "bf16")


@pytest.mark.parametrize("causal", [False, True])
def test_attention_entry_point(causal):
    """kernels.attention(algo="decode") on a dense cache equals kernels.decode."""
    q, k, v = make(2, 16, 4, 3, 2000, 128, "bf16", seed=4)
    got, lse = attention(q, k, v, algo="decode", causal=causal, return_lse=True)
    ref_out, ref_lse = reference(q, k, v, [2000, 2000], causal)
    check(got, lse, ref_out, ref_lse, "bf16")
    assert torch.equal(got, decode(q, k, v, causal=causal))
