"""Every kernel compiles for sm_80 and sm_90a, and ptxas's resource report parses (needs nvcc, no GPU)."""

from __future__ import annotations

import pytest
from flashsim.kernels import build, registry

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.slow,
    pytest.mark.skipif(build.find_nvcc() is None, reason="needs nvcc"),
]

ALGOS = ("standard", "v1", "v2", "v2-bwd")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("kernels")
    manifests = build.build_all(list(ALGOS), out=out)
    return out, manifests, build.resource_rows(manifests)


def test_every_variant_compiles_for_both_archs(built):
    out, manifests, rows = built
    assert {(m["algo"], m["arch"]) for m in manifests} == {(a, arch) for a in ALGOS for arch in registry.ARCHS}
    fams = registry.families()
    for algo in ALGOS:
        fam = fams[algo]
        for arch in registry.ARCHS:
            assert (out / f"{algo}.{arch}.cubin").stat().st_size > 0
            names = {r["kernel"] for r in rows if r["algo"] == algo and r["arch"] == arch}
            assert names == {f"{v.symbol(algo)}_{e}" for v in fam.variants for e in fam.entries}


def test_resources_parse(built):
    _, _, rows = built
    for r in rows:
        assert 0 < r["registers"] <= 255, r
        assert r["smem_dynamic_bytes"] <= 227 * 1024, r


def test_v2_spills_are_small(built):
    """The FA2 tiles hold ~200 fp32 accumulators per thread; ptxas may spill a few registers at d128
    (the build table reports them). More than a few words means the kernel changed shape."""
    _, _, rows = built
    for r in rows:
        if r["algo"] == "v2":
            assert r["spill_store_bytes"] <= 64 and r["stack_bytes"] <= 64, r
            if r["headdim"] == 64 and r["tiling"]["block_n"] == 128:
                assert r["spill_store_bytes"] == 0, r


def test_v2_bwd_spills_are_small(built):
    """The backward's main kernel holds dK, dV and the S / dP tiles (~190 fp32 values per thread at d64)
    within 255 registers; ptxas may spill a word or two, not more."""
    _, _, rows = built
    main = [r for r in rows if r["algo"] == "v2-bwd" and r["kernel"].endswith("_bwd")]
    assert len(main) == 2 * len(registry.family("v2-bwd").variants)
    for r in main:
        assert r["spill_store_bytes"] <= 16 and r["stack_bytes"] <= 16, r


def test_up_to_date_build_is_reused(built):
    out, manifests, _ = built
    fam = registry.family("v2")
    assert build.manifest(fam, "sm_90a", out)["hash"] == build.source_hash(fam, "sm_90a")
    first = next(m for m in manifests if m["algo"] == "v2" and m["arch"] == "sm_90a")
    (again,) = build.build_all(["v2"], ["sm_90a"], out=out)
    assert again == first
