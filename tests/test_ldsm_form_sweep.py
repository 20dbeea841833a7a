"""The ldsm_form sweep's Python side agrees with its CUDA source: every kernel the sweep launches is defined
in kernels/microbench/ldsm_form.cu, and each tile kernel issues what the v2 kernels' loops issue per warp
k-step (kernels/v2.cu, kernels/v2_bwd.cu)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from flashsim.experiments import calibrate_ldsm as cl

SOURCE = Path(cl.__file__).resolve().parents[1] / "kernels" / "microbench" / "ldsm_form.cu"


def _defined() -> set[str]:
    src = SOURCE.read_text()
    return set(re.findall(r"^(?:FORM|TILE|KERNEL|BESIDE)\((\w+),", src, re.M)) | set(
        re.findall(r'^extern "C" __global__ void (\w+)\(', src, re.M))


def test_every_swept_kernel_is_defined_and_every_defined_one_is_swept():
    swept = {*cl.FORM_KERNELS, *cl.SPLIT_KERNELS, *cl.TILE_KERNELS, *cl.FILL_KERNELS, *cl.TMA_FILL_KERNELS}
    assert swept == _defined()


def test_form_kernel_names_spell_their_loads_and_products():
    for name, (loads, x, trans, mma, dep) in cl.FORM_KERNELS.items():
        load = f"x{x}" if x else "v4"  # v4: ld.shared.v4 instead of ldmatrix
        assert name == f"form_l{loads}{load}{'t' if trans else ''}{'' if dep else 'i'}_m{mma}"


def test_tile_shapes_match_the_v2_loops():
    # forward S = Q K^T at BN 128: 2 Q + 8 K ldmatrix.x4, 2 x 16 products; P V at d64: 4 V loads (trans), 16
    fwd_s = cl._shape("tile_fwd_s_bn128")
    assert (fwd_s["ldsm"], fwd_s["mma"], fwd_s["ldsm_trans"]) == (10, 32, 0)
    pv = cl._shape("tile_fwd_pv_d64")
    assert (pv["ldsm"], pv["mma"], pv["ldsm_trans"], pv["smem_bytes"]) == (4, 16, 4, 2048)
    # backward dV += P^T dO at d64 (32 x 32 warp tiles): both operands transposed, 4 loads per 8 products
    tt = cl._shape("tile_bwd_tt_32x32")
    assert (tt["ldsm"], tt["mma"], tt["ldsm_trans"]) == (4, 8, 4)


def _synthetic(fraction: float) -> list[dict]:
    """Sweep points whose cycles follow max(L, P) + fraction x min(L, P), at 32 cycles per ldmatrix.x4 and 12
    per mma.sync per warp at 8 warps per SM (the H200's rates)."""
    points = []
    for name in [*cl.FORM_KERNELS, *cl.TILE_KERNELS]:
        shape = cl._shape(name)
        loads, products = 32.0 * shape["smem_bytes"] / 512, 12.0 * shape["mma"]
        if shape["ldsm"] and shape["mma"]:
            cycles = max(loads, products) + fraction * min(loads, products)
        else:
            cycles = loads + products
        points.append({"kernel": name, "warps_per_sm": 8, **shape, "cycles_per_warp_kstep": cycles})
    return points


def test_fit_recovers_the_fraction_the_points_were_made_with():
    from flashsim.experiments.ldsm_form_fit import analyse, unhidden_fraction

    fraction, err, n = unhidden_fraction(_synthetic(0.12))
    assert fraction == pytest.approx(0.12, abs=0.002) and err < 1e-3 and n == len(cl.TILE_KERNELS)
    forms = analyse(_synthetic(0.12))["forms"]
    assert forms["min_share"]["rms_relative_error"] < forms["port_share"]["rms_relative_error"]
    assert forms["overlap"]["rms_relative_error"] > 0.02


def test_the_tma_fills_are_swept_on_hopper_only(monkeypatch):
    """The copy engine's fill kernels exist in the sm_90a build alone (bulk copies on mbarriers), so the sweep
    launches them only there; their points say which copy filled."""
    src = SOURCE.read_text()
    guarded = src[src.index("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900"):]
    guarded = guarded[:guarded.index("#endif")]
    assert all(f"void {name}(" in guarded for name in cl.TMA_FILL_KERNELS)
    assert cl._shape("tmafill_l4x4_m0")["copy"] == "tma" and cl._shape("fill_l4x4_m0")["copy"] == "cp.async"
    assert cl._shape("tmafill_l4x4_m0")["fill_bytes"] == cl._shape("fill_l4x4_m0")["fill_bytes"]

    class Bench:  # only what ldsm_form reads before it hands the names to points()
        def __init__(self, arch):
            self.gpu, self.quick = type("Gpu", (), {"arch": arch, "sm_count": 132})(), True

    swept = {}
    monkeypatch.setattr(cl, "points", lambda b, names: swept.setdefault(b.gpu.arch, names) and [])
    for arch in ("sm_80", "sm_90a"):
        cl.ldsm_form(Bench(arch))
    assert not set(cl.TMA_FILL_KERNELS) & set(swept["sm_80"])
    assert set(cl.TMA_FILL_KERNELS) <= set(swept["sm_90a"])


def test_the_fill_share_per_filled_byte_for_either_copy():
    from flashsim.experiments.ldsm_form_fit import fill_port_fraction

    def point(kernel, loads, fills):  # per-SM rates as points() records them
        return {"kernel": kernel, "warps_per_sm": 8, "cycles_per_warp_kstep": 1.0,
                "smem_bytes_per_clk_per_sm": loads, "fill_bytes_per_clk_per_sm": fills}

    pts = [point("idle_l4x4_m0", 122.6, 0.0), point("fill_l4x4_m0", 120.9, 30.2), point("tmafill_l4x4_m0", 110.6, 40.0)]
    share, rates = fill_port_fraction(pts)
    assert share == pytest.approx(1.7 / 30.2) and rates["fills"] == 30.2
    tma, _ = fill_port_fraction(pts, kernel="tmafill_l4x4_m0")
    assert tma == pytest.approx(12.0 / 40.0)
    with pytest.raises(ValueError):
        fill_port_fraction(pts[:2], kernel="tmafill_l4x4_m0")
