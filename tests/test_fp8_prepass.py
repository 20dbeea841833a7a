"""v3-fp8's quantisation pre-pass: the torch reference (kernels/hopper_fp8.py) on the CPU, and the fused
kernel (kernels/fp8_prepass.cuh) against it on a Hopper GPU, bit for bit.

Bit for bit, not within an fp8 ulp: both sides run the same fp32 operations in the same order (sign flips,
butterflies over column bits 0..log2(d)-1, one multiply by fp32(1 / sqrt(d)), an exact max, the scale
amax / 448 and its IEEE reciprocal, one multiply, round to nearest even), each correctly rounded.
"""

from __future__ import annotations

import math

import pytest
from flashsim.errors import FlashsimError
from flashsim.kernels import fp8_prepass, hopper_fp8

torch = pytest.importorskip("torch")

gpu = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)), reason="needs an sm_90 GPU"
)


# ---- without a GPU ----------------------------------------------------------------------------------------


def test_params_layout_matches_kernel():
    # fp8_prepass.cuh static_asserts the same numbers for fp8_prepass::Params
    p = fp8_prepass._Params
    assert torch is not None and fp8_prepass.ctypes.sizeof(p) == 224
    assert p.signs.offset == 144 and p.hadamard_scale.offset == 212 and p.npad.offset == 216
    assert p.hadamard_order.offset == 220


def test_chunks_per_thread_covers_the_largest_block():
    # 14 groups of 16 rows over 8 thread blocks: at most 32 rows x 16 chunks = 512 chunks, 2 per thread
    assert fp8_prepass.chunks_per_thread(128, 224, 128, cluster=8) == 2
    assert fp8_prepass.chunks_per_thread(128, 224, 128, cluster=2) == 8  # 7 groups: 112 rows
    assert fp8_prepass.chunks_per_thread(192, 160, 64, cluster=4) == 2  # 48 rows x 8 chunks
    assert fp8_prepass.chunks_per_thread(128, 128, 64, cluster=8) == 1  # 16 rows x 8 chunks
    assert fp8_prepass.chunks_per_thread(128, 256, 256, cluster=8) == 4
    assert fp8_prepass.chunks_per_thread(128, 256, 256, cluster=2) is None  # 16 chunks per thread
    assert fp8_prepass.chunks_per_thread(128, 272, 128) is None  # over 256 rows: the torch path
    assert fp8_prepass.chunks_per_thread(128, 200, 128) is None  # not whole groups of 16


def test_rotation_is_the_hadamard_product():
    """The butterfly reference equals x diag(s) H (fp64 matmul, H block-diagonal where d is not a power of
    two) to fp32 rounding, for each head dim v3-fp8 runs."""
    for d in (64, 96, 128, 192, 256):
        x = torch.randn(3, d, dtype=torch.float64)
        diag = hopper_fp8.signs(d, seed=5)
        exact = x @ (diag[:, None] * hopper_fp8.hadamard(d))
        y = hopper_fp8.rotate(x.float(), diag)
        assert y.dtype == torch.float32
        assert (y.double() - exact).abs().max().item() < 1e-5 * x.abs().max().item()
    with pytest.raises(FlashsimError, match="positive head dim"):
        hopper_fp8.rotate(torch.ones(2, 0), hopper_fp8.signs(1))


def test_reference_quantises_within_half_an_e4m3_step():
    """Block scale = max|x| / 448; x / scale lands on e4m3 within half a step (3 mantissa bits)."""
    x = torch.randn(1, 2, 300, 64) * torch.logspace(-3, 3, 300)[:, None]
    xq, scale = hopper_fp8.quantize(x, 128)
    assert scale.shape == (1, 2, 3)
    blocks = torch.nn.functional.pad(x, (0, 0, 0, 84)).view(1, 2, 3, -1)
    assert torch.equal(scale, (blocks.abs().amax(-1) / torch.tensor(448.0)).clamp_min(1e-12))
    back = xq.float() * scale.repeat_interleave(128, 2)[:, :, :300, None]
    assert ((back - x).abs() <= x.abs() / 16 + scale.max() * 2**-9).all()
    assert xq.float().abs().max() == 448.0


def test_reference_transposes_v_with_the_key_permutation():
    vq = torch.arange(2 * 40 * 8, dtype=torch.float32).remainder(200).view(1, 2, 40, 8).to(torch.float8_e4m3fn)
    vt = hopper_fp8.transpose_v(vq, 32)
    assert vt.shape == (1, 2, 8, 64)
    perm = hopper_fp8.KEY_PERM
    for p in range(64):
        key = p // 16 * 16 + perm[p % 16]
        expect = vq[:, :, key].view(torch.uint8) if key < 40 else torch.zeros(1, 2, 8, dtype=torch.uint8)
        assert torch.equal(vt[:, :, :, p].view(torch.uint8), expect)


def test_fused_refuses_what_it_cannot_take():
    x = torch.zeros(1, 1, 8, 64, dtype=torch.bfloat16)
    assert fp8_prepass.serves(x, x, x, 128, 224)
    assert not fp8_prepass.serves(x.float(), x.float(), x.float(), 128, 224)  # fp32: the torch path
    assert not fp8_prepass.serves(x, x, x, 128, 200)  # V^T groups of 16 keys
    wide = torch.zeros(1, 1, 8, 512, dtype=torch.bfloat16)
    assert not fp8_prepass.serves(wide, wide, wide, 64, 64)
    with pytest.raises(FlashsimError, match="fused fp8 pre-pass takes"):
        fp8_prepass.quantize(x, x, x, 128, 200)
    with pytest.raises(FlashsimError, match="per-tensor scaling runs in torch"):
        hopper_fp8.prepare(x, x, x, 128, 224, scaling="tensor", fused=True)


# ---- on a Hopper GPU ----------------------------------------------------------------------------------------


def _inputs(b, h, hkv, nq, nk, d, dtype, outliers=False, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def one(heads, n):
        x = torch.randn(b, heads, n, d, generator=gen, device="cuda")
        if outliers:  # the FA3 paper's N(0, 1) + N(0, 100) Bernoulli(0.001)
            spikes = torch.randn(b, heads, n, d, generator=gen, device="cuda") * 10
            x = x + spikes * (torch.rand(b, heads, n, d, generator=gen, device="cuda") < 0.001)
        return x.to(dtype)

    return one(h, nq), one(hkv, nk), one(hkv, nk)


def _same(fused, ref):
    names = ("Q e4m3", "K e4m3", "V^T e4m3", "Q scales", "K scales", "V scales")
    for name, a, r in zip(names, fused, ref, strict=True):
        assert a.shape == r.shape and a.dtype == r.dtype, name
        bits = (a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a.view(torch.int32)).flatten()
        rbits = (r.view(torch.uint8) if r.dtype == torch.float8_e4m3fn else r.view(torch.int32)).flatten()
        diff = (bits != rbits).sum().item()
        assert diff == 0, f"{name}: {diff} of {bits.numel()} differ"


PREPASS_CASES = [
    # (b, h, hkv, nq, nk, d, block_m, block_n, dtype, incoherent)
    (2, 4, 4, 1024, 1024, 128, 128, 224, "bf16", True),  # v3-fp8's d128 tile
    (1, 3, 3, 1000, 1000, 128, 128, 224, "bf16", True),  # ragged last blocks, V^T padding
    (1, 8, 2, 333, 517, 64, 192, 160, "bf16", True),  # d64 tile, GQA, Nq != Nk
    (1, 2, 2, 700, 300, 128, 128, 128, "fp16", True),
    (1, 2, 1, 257, 257, 256, 128, 128, "bf16", True),  # head dim 256 (no v3-fp8 tile yet)
    (1, 2, 2, 200, 200, 96, 128, 128, "bf16", False),  # head dim 96 without the transform
    (1, 4, 2, 700, 555, 96, 192, 128, "bf16", True),  # v3-fp8's d96 tile: 12 lanes a row, blocks of 32 columns
    (1, 2, 2, 333, 400, 192, 128, 160, "fp16", True),  # v3-fp8's d192 tile: 24 lanes a row, blocks of 64
    (1, 2, 2, 500, 500, 128, 128, 224, "bf16", False),
    (1, 1, 1, 5, 3, 64, 192, 160, "bf16", True),  # fewer rows than one block
]


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("case", PREPASS_CASES, ids=lambda c: "q{}k{}d{}_{}x{}_{}".format(*c[3:9]) + "_had" * c[9])
@pytest.mark.parametrize("outliers", [False, True], ids=["randn", "outliers"])
def test_fused_prepass_equals_reference(case, outliers):
    b, h, hkv, nq, nk, d, bm, bn, dtype, incoherent = case
    q, k, v = _inputs(b, h, hkv, nq, nk, d, {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype], outliers)
    ref = hopper_fp8.prepare_reference(q, k, v, bm, bn, incoherent_processing=incoherent)
    for cluster in fp8_prepass.CLUSTERS:  # every cluster size that holds the block
        if fp8_prepass.chunks_per_thread(bm, bn, d, cluster):
            _same(
                hopper_fp8.prepare(q, k, v, bm, bn, incoherent_processing=incoherent, fused=True, cluster=cluster), ref
            )


@pytest.mark.gpu
@gpu
def test_fused_prepass_takes_strided_inputs():
    """(B, N, H, d) memory viewed as (B, H, N, d), as a model's projections often hand it over."""
    base = torch.randn(2, 600, 4, 128, device="cuda", dtype=torch.bfloat16)
    q = k = v = base.transpose(1, 2)
    assert fp8_prepass.serves(q, k, v, 128, 224)
    _same(hopper_fp8.prepare(q, k, v, 128, 224, fused=True), hopper_fp8.prepare_reference(q, k, v, 128, 224))


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("d, causal", [(128, False), (128, True), (64, False), (64, True), (96, True), (192, False)])
def test_v3_fp8_end_to_end_with_the_fused_prepass(d, causal):
    """The default call (fused pre-pass + v3_fp8.cu) against fp64 attention, and equal to the call whose
    pre-pass runs in torch (the inputs to the attention kernel are the same bits)."""
    q, k, v = _inputs(2, 4, 2, 1500, 1300, d, torch.bfloat16, outliers=True, seed=7)
    out = hopper_fp8.attention(q, k, v, causal=causal)
    torch_path = hopper_fp8.attention(q, k, v, causal=causal, fused=False)
    assert torch.equal(out, torch_path)
    g = q.shape[1] // k.shape[1]
    s = q.double() @ k.double().repeat_interleave(g, 1).transpose(-1, -2) / math.sqrt(d)
    if causal:  # bottom-right: query i sees keys j <= i + nk - nq
        i = torch.arange(s.shape[-2], device="cuda")[:, None]
        j = torch.arange(s.shape[-1], device="cuda")[None, :]
        s = s.masked_fill(j > i + (s.shape[-1] - s.shape[-2]), float("-inf"))
    ref = torch.softmax(s, -1).nan_to_num(0.0) @ v.double().repeat_interleave(g, 1)
    rel = ((out.double() - ref).pow(2).mean() / ref.pow(2).mean()).sqrt().item()
    assert rel < 0.08, rel
