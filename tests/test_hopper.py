"""FlashAttention-3 kernels (kernels/v3.cu, v3_fp8.cu): build for sm_90a, then numerics on a Hopper GPU.

Error bound as in FA3's tests: |out - ref64| <= 2 |sdpa_lowprec - ref64| + atol, per tensor (max), where
sdpa_lowprec is PyTorch's own 16-bit SDPA and ref64 an fp64 reference. Outputs are NaN-poisoned first.
"""

from __future__ import annotations

import math
import re
import shutil

import pytest

from kernels import hopper, hopper_wgmma_gen

torch = pytest.importorskip("torch")


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


gpu = pytest.mark.skipif(not _sm90(), reason="needs an sm_90 (Hopper) GPU")
nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


# ---- without a GPU ----------------------------------------------------------------------------------------


def test_wgmma_header_is_current():
    assert hopper_wgmma_gen.HEADER.read_text() == hopper_wgmma_gen.render()


def test_plan_and_refusals():
    launch = hopper.plan("v3", "Bf16", 128, False, 2, 16, 1000)
    assert (launch.block_m, launch.block_n) == (128, 176)  # FA3's d128 default
    assert launch.grid == (8, 16, 2) and launch.threads == 384
    assert hopper.plan("v3", "Bf16", 128, True, 1, 1, 128).block_n == 128
    assert hopper.plan("v3", "Bf16", 64, False, 1, 1, 128).block_m == 192
    assert hopper.smem_bytes("Bf16", 128, 128, 176) <= 227 * 1024
    with pytest.raises(hopper.FlashsimError, match="no Bf16 kernel for d256"):
        hopper.plan("v3", "Bf16", 256, False, 1, 1, 128)


def test_fp8_key_permutation_is_a_permutation():
    from kernels.hopper_fp8 import KEY_PERM

    assert sorted(KEY_PERM) == list(range(16))
    assert KEY_PERM[:4] == [0, 1, 8, 9]


@pytest.mark.nvcc
@nvcc
def test_kernels_build_for_sm90a(tmp_path):
    for algo in ("v3", "v3-fp8"):
        cubin, report = hopper.build(algo, tmp_path)
        image = cubin.read_bytes()
        for entry in hopper.ENTRIES:
            if (entry[0] == "E4m3") == (algo == "v3-fp8"):
                assert hopper.entry_name(*entry).encode() in image
        # No spills in any entry point, and setmaxnreg honoured (no C7507/C7508 warnings).
        spills = re.findall(r"(\d+) bytes spill stores", report)
        assert spills and all(s == "0" for s in spills), report
        assert "C7507" not in report and "C7508" not in report and "C7512" not in report


# ---- on a Hopper GPU ----------------------------------------------------------------------------------------


def _ref(q, k, v, causal):
    """fp64 attention with SDPA's top-left causal mask; GQA by repeating K/V heads."""
    g = q.shape[1] // k.shape[1]
    qd, kd, vd = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        nq, nk = s.shape[-2:]
        s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ vd


def _sdpa(q, k, v, causal):
    g = q.shape[1] // k.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), is_causal=causal
    )


def _inputs(kind, b, h, hkv, nq, nk, d, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32)

    q, k, v = rnd(b, h, nq, d), rnd(b, hkv, nk, d), rnd(b, hkv, nk, d)
    if kind == "ones":
        q, k = torch.ones_like(q), torch.ones_like(k)
    elif kind == "identity":  # each query matches one key strongly
        eye = torch.eye(d, device="cuda") * 4
        q = eye[torch.arange(nq, device="cuda") % d].expand(b, h, nq, d).clone()
        k = eye[torch.arange(nk, device="cuda") % d].expand(b, hkv, nk, d).clone()
    elif kind == "outliers":
        q = q + 30 * (torch.rand(q.shape, generator=gen, device="cuda") < 0.001)
        k = k + 30 * (torch.rand(k.shape, generator=gen, device="cuda") < 0.001)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _check(out, q, k, v, causal, factor=2.0, atol=1e-3):
    assert not torch.isnan(out).any(), "NaN left in the output (rows not written?)"
    ref = _ref(q, k, v, causal)
    err = (out.double() - ref).abs().max().item()
    base = (_sdpa(q, k, v, causal).double() - ref).abs().max().item()
    assert err <= factor * base + atol, f"max error {err:.3e} vs SDPA's {base:.3e}"
    return err, base


CASES = [
    # (b, h, hkv, nq, nk, d, causal)
    (2, 4, 4, 1024, 1024, 128, False),
    (2, 4, 4, 1024, 1024, 128, True),
    (1, 3, 3, 1000, 1000, 128, False),
    (1, 3, 3, 777, 777, 128, True),
    (2, 4, 4, 1024, 1024, 64, False),
    (2, 4, 4, 1024, 1024, 64, True),
    (1, 2, 2, 333, 333, 64, True),
    (1, 2, 2, 100, 100, 64, False),
    (1, 8, 2, 512, 512, 128, True),  # GQA
    (1, 2, 2, 256, 700, 128, False),  # Nk > Nq
]


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}h{}kv{}q{}k{}d{}{}".format(*c[:6], "c" if c[6] else ""))
def test_v3_random(case, dtype):
    b, h, hkv, nq, nk, d, causal = case
    q, k, v = _inputs("random", b, h, hkv, nq, nk, d, getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[dtype]))
    out = torch.full_like(q, float("nan"))
    hopper.attention(q, k, v, causal=causal, out=out)
    _check(out, q, k, v, causal)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kind", ["ones", "identity", "outliers"])
@pytest.mark.parametrize("causal", [False, True])
def test_v3_structured(kind, causal):
    q, k, v = _inputs(kind, 1, 2, 2, 640, 640, 128, torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    hopper.attention(q, k, v, causal=causal, out=out)
    _check(out, q, k, v, causal)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(
    "d, tile, causal, schedule",
    [
        (128, (128, 176), False, "overlap"),
        (128, (128, 176), False, "serial"),
        (128, (128, 128), False, "pingpong"),
        (128, (128, 128), True, "serial"),
        (64, (192, 128), False, "serial"),
        (64, (128, 128), False, "pingpong"),
        (64, (128, 128), True, "pingpong"),
    ],
)
def test_v3_schedules_and_tiles(d, tile, causal, schedule):
    from algorithms.tiling import Tiling

    q, k, v = _inputs("random", 2, 2, 2, 900, 900, d, torch.bfloat16, seed=1)
    out = torch.full_like(q, float("nan"))
    hopper.attention(q, k, v, causal=causal, tiling=Tiling(*tile, 4 * (tile[0] // 64 + 1)), schedule=schedule, out=out)
    _check(out, q, k, v, causal)


def fp8_outliers(b, h, n, d, seed=0):
    """The FA3 paper's test distribution: N(0, 1) + N(0, 100) * Bernoulli(0.001)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def one():
        x = torch.randn(b, h, n, d, generator=gen, device="cuda")
        spikes = torch.randn(b, h, n, d, generator=gen, device="cuda") * 10
        mask = torch.rand(b, h, n, d, generator=gen, device="cuda") < 0.001
        return (x + spikes * mask).to(torch.bfloat16)

    return one(), one(), one()


def fp8_rmse_table(b=2, h=4, n=2048, d=128, causal=False):
    """RMSE vs fp64 of: SDPA bf16, v3 bf16, and v3-fp8 under each scaling / incoherent-processing choice."""
    from kernels import hopper_fp8

    q, k, v = fp8_outliers(b, h, n, d)
    ref = _ref(q, k, v, causal)

    def rmse(x):
        return ((x.double() - ref) ** 2).mean().sqrt().item()

    rows = {"sdpa bf16": rmse(_sdpa(q, k, v, causal)), "v3 bf16": rmse(hopper.attention(q, k, v, causal=causal))}
    for scaling in ("tensor", "block"):
        for ip in (False, True):
            out = hopper_fp8.attention(q, k, v, causal=causal, scaling=scaling, incoherent_processing=ip)
            rows[f"fp8 {scaling} scale{' + incoherent' if ip else ''}"] = rmse(out)
    return rows


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_accuracy_ordering(causal):
    rows = fp8_rmse_table(1, 2, 1024, 128, causal)
    assert rows["fp8 block scale + incoherent"] < rows["fp8 tensor scale"]
    assert rows["fp8 block scale"] <= rows["fp8 tensor scale"] * 1.05
    assert rows["fp8 block scale + incoherent"] < 0.05


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("n, causal", [(1024, False), (1000, True), (300, False)])
def test_fp8_matches_reference(n, causal):
    from kernels import hopper_fp8

    q, k, v = _inputs("random", 1, 2, 2, n, n, 128, torch.bfloat16, seed=3)
    out = torch.full(q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    hopper_fp8.attention(q, k, v, causal=causal, out=out)
    assert not torch.isnan(out).any()
    ref = _ref(q, k, v, causal)
    # e4m3 keeps 3 mantissa bits: |V| ~ 3 quantises with error up to ~0.1, so bound the relative RMSE.
    rel = ((out.double() - ref).pow(2).mean() / ref.pow(2).mean()).sqrt().item()
    assert rel < 0.05, rel
