"""Kernel machinery that needs no GPU: launch descriptions, ptxas parsing, the params mirror, API errors."""

from __future__ import annotations

import ctypes
import json
from dataclasses import replace

import pytest
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.tiling import Tiling, default_tiling, fa1_split_count, fa1_splits, smem_bytes
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.kernels import build, registry
from flashsim.kernels.launch import PARAMS_BYTES, AttnParams

torch = pytest.importorskip("torch")

ALGOS = ("standard", "v1", "v2")
H200_SMEM = type("Limits", (), {"smem_per_block_max_bytes": 232448, "smem_per_sm_bytes": 233472})()


def test_params_mirror_matches_the_cuda_struct():
    assert ctypes.sizeof(AttnParams) == PARAMS_BYTES
    assert AttnParams.q.offset == 0 and AttnParams.q_batch_stride.offset == 64
    assert AttnParams.batch.offset == 64 + 13 * 8


def test_families_register_their_variants():
    fams = registry.families()
    assert set(ALGOS) <= set(fams)
    for algo in ALGOS:
        fam = fams[algo]
        for d in fam.headdims:
            for dtype in registry.DTYPES:
                fam.variant(d, dtype, fam.default_tiling(d, H200_SMEM))  # the default is always built
        tu = build.translation_unit(fam)
        assert tu.count(fam.macro + "(") == len(fam.variants)


def test_v2_defaults_are_the_fa2_tiles():
    v2 = registry.family("v2")
    for d in (64, 128):
        problem = Problem(batch=1, heads=1, seqlen_q=1024, headdim=d)
        assert v2.default_tiling(d, H200_SMEM) == default_tiling("v2", problem, H200_SMEM)
    assert v2.default_tiling(64, None) == Tiling(128, 128, 4, 2)
    assert v2.default_tiling(128, None) == Tiling(128, 64, 4, 2)


def test_v2_shared_memory_matches_the_schedule():
    """Swizzled tiles take exactly the bytes algorithms.tiling counts for v2."""
    v2 = registry.family("v2")
    for variant in v2.variants:
        if variant.headdim % 64 == 0:
            problem = Problem(batch=1, heads=1, seqlen_q=128, headdim=variant.headdim, dtype=variant.dtype)
            assert v2.smem_bytes(variant, "fwd") == smem_bytes("v2", problem, variant.tiling)


def test_standard_shared_memory_matches_the_schedule():
    """The Q K^T kernel's k-slice ring (which its epilogue reuses for the output tile) is what
    algorithms.tiling counts for standard."""
    standard = registry.family("standard")
    for variant in standard.variants:
        problem = Problem(batch=1, heads=1, seqlen_q=128, headdim=variant.headdim, dtype=variant.dtype)
        assert standard.smem_bytes(variant, "scores") == smem_bytes("standard", problem, variant.tiling)


def test_v1_runs_the_schedules_tiles_and_shared_memory():
    """The v1 kernel takes FA1's tiles (the model's default for long key sequences) and exactly the shared
    memory algorithms.tiling counts for v1, so the model's occupancy is the kernel's."""
    v1 = registry.family("v1")
    h200 = load_profile("h200")
    for variant in v1.variants:
        problem = Problem(batch=4, heads=16, seqlen_q=4096, headdim=variant.headdim, dtype=variant.dtype)
        tiling = default_tiling("v1", problem, h200)
        assert replace(tiling, splits=1) == variant.tiling
        if variant.headdim % 64 == 0:
            assert v1.smem_bytes(variant, "fwd") == smem_bytes("v1", problem, variant.tiling)


def test_v1_kernel_splits_follow_fa1s_rule():
    """Blocks per SM from the kernel's registers and SMEM; splits from FA1's wave-efficiency rule, the
    same count the model picks when its occupancy agrees."""
    from flashsim.kernels.v1 import blocks_per_sm

    variant = registry.family("v1").variant(64, "bf16", Tiling(16, 256, 4, 1))
    assert blocks_per_sm(variant, 108, H200_SMEM.smem_per_sm_bytes) == 2  # SMEM-limited, as ncu reports
    assert blocks_per_sm(variant, 255, 10**6) == 2  # then registers: 255 x 128 threads, twice per SM
    h200 = load_profile("h200")
    for b, h, n in ((8, 32, 2048), (1, 32, 16384), (2, 16, 8192), (32, 16, 512)):
        problem = Problem(batch=b, heads=h, seqlen_q=n, headdim=64)
        slots = h200.sm_count * blocks_per_sm(variant, 108, H200_SMEM.smem_per_sm_bytes)
        assert fa1_split_count(b * h, n // 16, slots) == fa1_splits(problem, variant.tiling, h200)


def test_arch_selection():
    v2 = registry.family("v2")
    assert v2.arch_for((9, 0)) == "sm_90a"
    assert v2.arch_for((8, 0)) == "sm_80"
    assert v2.arch_for((8, 9)) == "sm_80"
    for cc in ((7, 5), (10, 0), (9, 1)):
        with pytest.raises(FlashsimError, match="built for sm_80, sm_90a"):
            v2.arch_for(cc)


def test_unbuilt_tiling_lists_the_built_ones():
    v2 = registry.family("v2")
    with pytest.raises(FlashsimError, match=r"built: .*128x64, 4 warps, 2 stages") as info:
        v2.variant(128, "bf16", Tiling(128, 128, 4, 2))
    assert "64x64" in str(info.value)
    with pytest.raises(FlashsimError, match="head dims"):
        v2.variant(80, "bf16", Tiling(128, 64, 4, 2))


PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_fwd' for 'sm_90a'
ptxas info    : Function properties for k_fwd
    24 bytes stack frame, 56 bytes spill stores, 40 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 24 bytes cumulative stack size
ptxas info    : Compile time = 361.361 ms
ptxas info    : Compiling entry function 'k_softmax' for 'sm_80'
ptxas info    : Function properties for k_softmax
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 1024 bytes smem, 560 bytes cmem[0]
"""


def test_parse_ptxas():
    got = {r.kernel: r for r in build.parse_ptxas(PTXAS)}
    assert got["k_fwd"] == build.Resources("k_fwd", "sm_90a", 255, 0, 24, 56, 40)
    assert got["k_softmax"] == build.Resources("k_softmax", "sm_80", 32, 1024, 0, 0, 0)


def test_gencode_flags():
    assert build.gencode("sm_80") == "-gencode=arch=compute_80,code=sm_80"
    assert build.gencode("sm_90a") == "-gencode=arch=compute_90a,code=sm_90a"


def test_build_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHSIM_KERNEL_DIR", str(tmp_path / "k"))
    assert build.build_dir() == tmp_path / "k"
    assert build.build_dir(tmp_path / "o") == tmp_path / "o"
    monkeypatch.delenv("FLASHSIM_KERNEL_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    assert build.build_dir() == tmp_path / "c" / "flashsim" / "kernels"


def test_build_without_nvcc_is_one_line(monkeypatch, tmp_path, capsys):
    from flashsim.cli import main

    monkeypatch.setenv("FLASHSIM_NVCC", str(tmp_path / "missing-nvcc"))
    assert main(["kernels", "build", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "nvcc not found" in err


def test_list_command(capsys):
    from flashsim.cli import main

    assert main(["kernels", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "d128 bf16 128x64, 4 warps, 2 stages" in data["v2"]["variants"]


def test_stale_build_without_nvcc_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHSIM_NVCC", str(tmp_path / "missing-nvcc"))
    with pytest.raises(FlashsimError, match="no up-to-date v2 kernels"):
        build.ensure_built(registry.family("v2"), "sm_90a", tmp_path)


# ---- API errors, raised before any GPU is touched ------------------------------------------------------------


def cpu(*shape, dtype=torch.bfloat16):
    return torch.zeros(*shape, dtype=dtype)


def attention(*args, **kwargs):
    from flashsim.kernels import attention

    return attention(*args, **kwargs)


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        ((cpu(1, 2, 8, 64, dtype=torch.float32),) * 3, {}, "float16 or bfloat16"),
        ((cpu(2, 8, 64),) * 3, {}, "must be 4-D"),
        ((cpu(1, 2, 8, 64), cpu(1, 2, 8, 64, dtype=torch.float16), cpu(1, 2, 8, 64)), {}, "share a dtype"),
        ((cpu(1, 3, 8, 64), cpu(1, 2, 8, 64), cpu(1, 2, 8, 64)), {}, "multiple"),
        ((cpu(1, 2, 8, 64), cpu(1, 2, 8, 32), cpu(1, 2, 8, 32)), {}, "agree on batch and head dim"),
        ((cpu(1, 2, 8, 64), cpu(1, 2, 8, 64), cpu(1, 2, 9, 64)), {}, "one shape"),
        ((cpu(1, 2, 0, 64),) * 3, {}, "empty"),
        ((cpu(1, 2, 8, 64),) * 3, {"algo": "v9"}, "unknown algorithm"),
        ((cpu(1, 2, 8, 80),) * 3, {}, "head dim"),
        ((cpu(1, 2, 8, 192),) * 3, {}, "built for head dims"),
        ((cpu(1, 2, 8, 128),) * 3, {"tiling": Tiling(128, 128, 4, 2)}, "built:"),
        ((cpu(1, 2, 8, 64),) * 3, {"tiling": (128, 128)}, "must be an algorithms.tiling.Tiling"),
        ((cpu(1, 2, 8, 64),) * 3, {"splits": 2}, "splits is a v1 and decode option"),
        ((cpu(1, 2, 8, 64),) * 3, {}, "CUDA tensors"),
        ((cpu(1, 2, 8, 64),) * 3, {"algo": "v1"}, "CUDA tensors"),
        ((cpu(1, 2, 8, 64),) * 3, {"algo": "v3"}, "CUDA tensors"),
        (("q", "k", "v"), {}, "torch.Tensor"),
    ],
)
def test_api_errors(args, kwargs, match):
    with pytest.raises(FlashsimError, match=match):
        attention(*args, **kwargs)


def test_loaded_modules_are_reused(monkeypatch):
    """After the first call a launch neither rereads the manifest nor reloads the cubin."""
    from flashsim.kernels import api

    calls = []
    monkeypatch.setattr(api, "_modules", {})
    monkeypatch.setattr(api.build, "ensure_built", lambda fam, arch: calls.append(("built", arch)) or "cubin")
    monkeypatch.setattr(api.driver, "load_module", lambda index, path: calls.append(("loaded", index)) or object())
    fam = registry.family("v2")
    first = api._module(fam, "sm_90a", 0)
    assert api._module(fam, "sm_90a", 0) is first
    assert api._module(fam, "sm_90a", 1) is not first
    assert calls == [("built", "sm_90a"), ("loaded", 0), ("built", "sm_90a"), ("loaded", 1)]


def test_bench_update_replaces_only_the_remeasured_rows():
    from flashsim.experiments.bench_kernels import merged

    def row(impl, tflops):
        return {"impl": impl, "headdim": 64, "causal": False, "seqlen": 512, "tflops": tflops}

    old = {"provenance": {"date": "then"}, "results": [row("v1", 1.0), row("v2", 2.0)]}
    new = {"provenance": {"date": "now", "driver": "580", "torch": "2.11", "command": "bench --impls v1"},
           "results": [row("v1", 9.0)]}
    out = merged(old, new)
    assert out["results"] == [row("v1", 9.0), row("v2", 2.0)] and out["provenance"] == {"date": "then"}
    assert out["notes"] == ["v1 rows re-measured now (driver 580, torch 2.11): `bench --impls v1`; "
                            "the other rows are from the run above."]

