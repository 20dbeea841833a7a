"""FlashAttention-3 kernels (kernels/v3.cu, v3_fp8.cu): build for sm_90a, then numerics on a Hopper GPU.

Error bound as in FA3's tests: |out - ref64| <= 2 |sdpa_lowprec - ref64| + atol, per tensor (max), where
sdpa_lowprec is PyTorch's own 16-bit SDPA and ref64 an fp64 reference. Outputs are NaN-poisoned first.
"""

from __future__ import annotations

import math
import re
import shutil

import pytest
from flashsim.kernels import hopper, hopper_wgmma_gen

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
    assert launch.grid == (132, 1, 1) and launch.threads == 384  # persistent: one block per SM
    assert hopper.plan("v3", "Bf16", 128, True, 2, 16, 1000).grid == (256, 1, 1)  # causal: one per tile
    assert hopper.plan("v3", "Bf16", 128, True, 1, 1, 128).block_n == 128
    assert hopper.plan("v3", "Bf16", 64, False, 1, 1, 128).block_m == 192
    assert hopper.smem_bytes("Bf16", 128, 128, 176) <= 227 * 1024
    assert hopper.plan("v3-fp8", "E4m3", 128, False, 1, 1, 128).block_n == 224  # FA3's fp8 default
    assert hopper.plan("v3-fp8", "E4m3", 64, True, 1, 1, 128).name.startswith("v3_E4m3_d64_m192_n160")
    assert [hopper.panel_bytes(x) for x in (256, 224, 192, 160, 64)] == [128, 32, 64, 32, 64]
    with pytest.raises(hopper.FlashsimError, match="no Bf16 kernel for d256"):
        hopper.plan("v3", "Bf16", 256, False, 1, 1, 128)


def test_params_layout_matches_kernel():
    # v3.cu static_asserts the same numbers for V3Params
    assert hopper._Params.scale_log2.offset == 72 and hopper._Params.batch.offset == 76
    assert hopper.ctypes.sizeof(hopper._Params) == 80


def test_fp8_key_permutation_is_a_permutation():
    from flashsim.kernels.hopper_fp8 import KEY_PERM

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
    from flashsim.algorithms.tiling import Tiling

    q, k, v = _inputs("random", 2, 2, 2, 900, 900, d, torch.bfloat16, seed=1)
    out = torch.full_like(q, float("nan"))
    hopper.attention(q, k, v, causal=causal, tiling=Tiling(*tile, 4 * (tile[0] // 64 + 1)), schedule=schedule, out=out)
    _check(out, q, k, v, causal)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(
    "d, causal, persistent",
    [(128, False, True), (128, True, True), (128, False, False), (64, False, True), (64, True, True)],
)
def test_v3_persistent_grid(d, causal, persistent):
    # 4 x 8 heads x 8 query blocks = 256 tiles: a persistent block (one per SM) takes two or more.
    q, k, v = _inputs("random", 4, 8, 4, 1000, 1000, d, torch.bfloat16, seed=2)
    out = torch.full_like(q, float("nan"))
    hopper.attention(q, k, v, causal=causal, out=out, persistent=persistent)
    _check(out, q, k, v, causal)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_accuracy_ordering(causal):
    from flashsim.experiments.bench_hopper import fp8_rmse_table

    rows = fp8_rmse_table(1, 2, 1024, 128, causal)
    assert rows["fp8 block scale + incoherent"] < rows["fp8 tensor scale"]
    assert rows["fp8 block scale"] <= rows["fp8 tensor scale"] * 1.05
    assert rows["fp8 block scale + incoherent"] < 0.05


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(
    "n, causal, d, tile",
    [
        (1024, False, 128, None),  # FA3's 128 x 224: V^T in 32-key panels
        (1000, True, 128, None),
        (300, False, 128, (128, 128)),  # 128-key panels
        (700, False, 128, (128, 192)),  # 64-key panels
        (1000, False, 64, None),  # 192 x 160, 64-byte Q/K rows
        (555, True, 64, None),
    ],
)
def test_fp8_matches_reference(n, causal, d, tile):
    from flashsim.algorithms.tiling import Tiling
    from flashsim.kernels import hopper_fp8

    q, k, v = _inputs("random", 1, 2, 2, n, n, d, torch.bfloat16, seed=3)
    out = torch.full(q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    tiling = Tiling(*tile, 4 * (tile[0] // 64 + 1)) if tile else None
    hopper_fp8.attention(q, k, v, causal=causal, out=out, tiling=tiling)
    assert not torch.isnan(out).any()
    ref = _ref(q, k, v, causal)
    # e4m3 keeps 3 mantissa bits (P and V each lose ~3% relative): bound the relative RMSE. Measured on
    # the H200: 0.052-0.054 for these random inputs.
    rel = ((out.double() - ref).pow(2).mean() / ref.pow(2).mean()).sqrt().item()
    assert rel < 0.08, rel
