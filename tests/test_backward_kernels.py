"""The v2-bwd kernels' launch side without a GPU: the params mirror, the tiles against the record's mapper and
shared memory, and attention_backward's input checks (each a FlashsimError)."""

from __future__ import annotations

import ctypes

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.tiling import default_tiling, smem_bytes
from flashsim.errors import FlashsimError
from flashsim.kernels import attention_backward, registry
from flashsim.kernels.v2_bwd import PARAMS_BYTES, BwdParams

torch = pytest.importorskip("torch")

H200 = type("Limits", (), {"smem_per_block_max_bytes": 232448, "smem_per_sm_bytes": 233472})()
A100 = type("Limits", (), {"smem_per_block_max_bytes": 166912, "smem_per_sm_bytes": 167936})()


def test_params_mirror_matches_the_cuda_struct():
    assert ctypes.sizeof(BwdParams) == PARAMS_BYTES
    assert BwdParams.dv.offset == 12 * 8 and BwdParams.batch.offset == 13 * 8
    assert BwdParams.scale_log2.offset == PARAMS_BYTES - 4


@pytest.mark.parametrize("limits", [H200, A100], ids=["H200", "A100"])
@pytest.mark.parametrize("d", [64, 128])
def test_kernels_run_the_tiles_the_record_simulates(limits, d):
    """The validator simulates the record's mapper; the family launches the same tiling, and it is built."""
    fam = registry.family("v2-bwd")
    problem = Problem(batch=2, heads=16, seqlen_q=4096, headdim=d)
    tiling = fam.default_tiling(d, limits)
    assert tiling == default_tiling("v2-bwd", problem, limits)
    for dtype in registry.DTYPES:
        fam.variant(d, dtype, tiling)


def test_shared_memory_matches_the_schedule():
    fam = registry.family("v2-bwd")
    for variant in fam.variants:
        problem = Problem(batch=1, heads=1, seqlen_q=512, headdim=variant.headdim, dtype=variant.dtype)
        assert fam.smem_bytes(variant, "bwd") == smem_bytes("v2-bwd", problem, variant.tiling)
        assert fam.smem_bytes(variant, "bwd") <= 227 * 1024


def _tensors(dtype=torch.float16, d=64, nq=64, nk=48, h=4, hkv=2):
    q = torch.zeros(1, h, nq, d, dtype=dtype)
    k = torch.zeros(1, hkv, nk, d, dtype=dtype)
    v = torch.zeros(1, hkv, nk, d, dtype=dtype)
    out, dout = torch.zeros_like(q), torch.zeros_like(q)
    lse = torch.zeros(1, h, nq, dtype=torch.float32)
    return q, k, v, out, lse, dout


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: {**t, "q": t["q"].float()}, "float16 or bfloat16"),
        (lambda t: _named(_tensors(d=96)), "head dims 64, 128"),
        (lambda t: {**t, "lse": t["lse"][:, :, :10]}, "lse must be"),
        (lambda t: {**t, "lse": t["lse"].double()}, "lse must be"),
        (lambda t: {**t, "dout": t["dout"][:, :2]}, "dout must be"),
        (lambda t: {**t, "out": t["out"].bfloat16()}, "out must be"),
        (lambda t: {**t, "out": None}, "out must be a torch.Tensor"),
        (lambda t: {**t, "k": t["k"][:, :, :, :32], "v": t["v"][:, :, :, :32]}, "must agree"),
        (lambda t: _named(_tensors(h=3, hkv=2)), "multiple"),
        (lambda t: t, "CUDA tensors"),
    ],
)
def test_bad_input_is_one_flashsim_error(change, message):
    with pytest.raises(FlashsimError, match=message):
        attention_backward(**change(_named(_tensors())))


def _named(tensors):
    return dict(zip(("q", "k", "v", "out", "lse", "dout"), tensors, strict=True))


def test_forward_api_refuses_the_backward_family():
    from flashsim.kernels.launch import Call

    fam = registry.family("v2-bwd")
    with pytest.raises(FlashsimError, match="attention_backward"):
        fam.run(None, fam.variants[0], Call(*_tensors()[:4], None, False, 1.0))
