"""The decode kernel's machinery that needs no GPU: registration, the params mirror, its tiling against the
simulator's decode record, the split count, and the input checks (CPU tensors fail every check before the
device one). tests/test_decode_gpu.py runs it; the nvcc test below builds it."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.splitkv import split_block_n, splits_heuristic
from flashsim.algorithms.tiling import check_fits
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.kernels import build, registry
from flashsim.kernels.decode import PARAMS_BYTES, DecodeParams, smem_bytes
from flashsim.kernels.decode_api import auto_splits

torch = pytest.importorskip("torch")

SOURCE = Path(build.KERNEL_DIR) / "decode.cu"
H200_SMEM_PER_SM, RESERVED_PER_BLOCK = 233472, 1024


def test_params_mirror_matches_the_cuda_struct():
    asserted = re.search(r"sizeof\(DecodeParams\) == (\d+)", SOURCE.read_text())
    assert ctypes.sizeof(DecodeParams) == PARAMS_BYTES == int(asserted.group(1))
    assert DecodeParams.q_batch_stride.offset == 9 * 8 and DecodeParams.batch.offset == 9 * 8 + 13 * 8


def test_family_builds_both_head_dims_dtypes_and_archs():
    fam = registry.family("decode")
    assert fam.headdims == (64, 128) and set(fam.archs) == {"sm_80", "sm_90a"}
    for d in (64, 128):
        for dtype in registry.DTYPES:
            assert fam.variant(d, dtype, fam.tiling_for(d, None)).headdim == d
    tu = build.translation_unit(fam)
    assert tu.count("FLASHSIM_DECODE(") == len(fam.variants) == 4
    with pytest.raises(FlashsimError, match="head dims 64, 128"):
        fam.variant(96, "bf16", fam.tiling_for(128, None))


@pytest.mark.parametrize("d", [64, 128])
def test_tiling_is_one_the_decode_record_accepts(d):
    """64 packed rows and 4 warps as the schedule; the ring fits the SM twice over (FA2's split heuristic
    counts two blocks per SM), and the simulator's footprint check takes it."""
    fam = registry.family("decode")
    t = fam.tiling_for(d, None)
    assert (t.block_m, t.warps) == (64, 4) and t.stages >= 2 and t.block_n % 16 == 0
    variant = fam.variant(d, "bf16", t)
    smem = smem_bytes(variant, "fwd")
    assert smem == (t.block_m + 2 * t.stages * t.block_n) * d * 2
    assert 2 * (smem + RESERVED_PER_BLOCK) <= H200_SMEM_PER_SM
    problem = Problem(batch=8, heads=32, seqlen_q=1, headdim=d, seqlen_k=65536, kv_heads=4)
    check_fits("decode", problem, t, load_profile("h200-sxm-141gb"))


def test_auto_splits_is_fa2s_rule_over_packed_tiles():
    # one sequence, 4 K/V heads: 4 packed tiles on 132 SMs -> the heuristic's split count over 128-key blocks
    expected = splits_heuristic(4, 2 * 132, 65536 // split_block_n(128))
    assert auto_splits(1, 32, 4, 1, 65536, 128, 132) == expected > 1
    # enough tiles already: no split
    assert auto_splits(64, 32, 8, 1, 4096, 128, 132) == 1


def tensors(b=2, h=8, hkv=2, nq=1, nk=100, d=128, dtype=torch.bfloat16):
    return (torch.zeros(b, h, nq, d, dtype=dtype), torch.zeros(b, hkv, nk, d, dtype=dtype),
            torch.zeros(b, hkv, nk, d, dtype=dtype))


def paged(pages=6, page_size=16, hkv=2, d=128):
    return torch.zeros(pages, page_size, hkv, d, dtype=torch.bfloat16), torch.zeros(pages, page_size, hkv, d,
                                                                                     dtype=torch.bfloat16)


def call(*args, **kwargs):
    from flashsim.kernels import decode

    return decode(*args, **kwargs)


def test_input_checks():
    q, k, v = tensors()
    cases = [
        ((q.float(), k, v), {}, "float16 or bfloat16"),
        ((q, k.half(), v), {}, "share a dtype"),
        ((q[:, :, :, :64], k, v), {}, "agree on batch and head dim"),
        ((torch.zeros(2, 8, 17, 128, dtype=torch.bfloat16), k, v), {}, "1 to 16 queries"),
        ((q, k, v[:, :, :50]), {}, "one shape"),
        ((torch.zeros(2, 6, 1, 128, dtype=torch.bfloat16), torch.zeros(2, 4, 100, 128, dtype=torch.bfloat16),
          torch.zeros(2, 4, 100, 128, dtype=torch.bfloat16)), {}, "multiple of the cache's 4"),
        ((q, k, v), {"cache_seqlens": torch.tensor([10, 200], dtype=torch.int32)}, r"\[0, 100\]"),
        ((q, k, v), {"cache_seqlens": torch.tensor([10, 20])}, "int32 tensor of shape"),
        ((q, k, v), {"splits": 0}, "1..128"),
        ((q, k, v), {"splits": 129}, "1..128"),
        ((q, k, v), {"splits": True}, "1..128"),
        ((q, k, v), {"splits": "many"}, "1..128"),
        ((q, k, v), {}, "CUDA tensors"),
        ((q[:, :, :, :64], k[..., :64], v[..., :64]), {"splits": 1}, "CUDA tensors"),
    ]
    for args, kwargs, match in cases:
        with pytest.raises(FlashsimError, match=match):
            call(*args, **kwargs)
    with pytest.raises(FlashsimError, match="head dims 64, 128"):
        call(*tensors(d=96))


def test_paged_input_checks():
    q, _, _ = tensors()
    pk, pv = paged()
    lens = torch.tensor([20, 40], dtype=torch.int32)
    table = torch.tensor([[0, 1, 0], [2, 3, 4]], dtype=torch.int32)
    cases = [
        ({"block_table": table}, (pk, pv), "needs cache_seqlens"),
        ({"block_table": table.long(), "cache_seqlens": lens}, (pk, pv), "int32 tensor"),
        ({"block_table": table[:1], "cache_seqlens": lens}, (pk, pv), r"shape \(2, max_pages\)"),
        ({"block_table": table, "cache_seqlens": lens}, paged(page_size=24), "page size 24"),
        ({"block_table": table, "cache_seqlens": torch.tensor([20, 49], dtype=torch.int32)}, (pk, pv),
         r"\[0, 48\]"),
        ({"block_table": torch.tensor([[0, 9, 0], [2, 3, 4]], dtype=torch.int32), "cache_seqlens": lens},
         (pk, pv), "outside the cache's 6 pages"),
        ({"block_table": table, "cache_seqlens": lens}, (pk, pv), "CUDA tensors"),
    ]
    for kwargs, (kc, vc), match in cases:
        with pytest.raises(FlashsimError, match=match):
            call(q, kc, vc, **kwargs)


def test_attention_routes_decode_and_checks_its_queries():
    from flashsim.kernels import attention

    q, k, v = tensors(nq=20)
    with pytest.raises(FlashsimError, match="1 to 16 queries"):
        attention(q, k, v, algo="decode")
    with pytest.raises(FlashsimError, match="CUDA tensors"):
        attention(*tensors(), algo="decode", causal=True)


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.skipif(build.find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_cli_builds_decode_without_spills(arch, tmp_path):
    cmd = [sys.executable, "-m", "flashsim.cli", "kernels", "build", "--algo", "decode", "--arch", arch,
           "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if " decode " in ln and arch in ln]
    assert len(lines) == 8, proc.stdout  # 2 head dims x 2 dtypes x (fwd, combine)
    assert all(ln.rstrip(" │|").endswith("-") for ln in lines), proc.stdout  # the spill column: none
