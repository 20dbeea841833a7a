"""ldmatrix-fed mma.sync: the k-steps of our v2 forward and backward GEMMs, simulated as one GEMM per SM, take
the cycles the calibrate ldsm_form sweep measured for them on an H200 (experiments/results/h200/ldsm-form/),
since the profile's unhidden fraction comes from those measurements."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from flashsim.algorithms.ir import RMEM, SMEM, Gemm, Kernel, Role
from flashsim.experiments.calibrate_ldsm import TILE_KERNELS
from flashsim.hw_profiles import load_profile
from flashsim.simulator.gpu import Gpu
from flashsim.simulator.timing import _ldsm_unhidden

SWEEP = Path(__file__).resolve().parents[1] / "experiments/results/h200/ldsm-form/ldsm-form.json"
KSTEPS = 256
WARPS = 8  # per SM, as our v2 kernels run (forward: 2 blocks of 4 warps, backward: 1 block of 8)


def _measured() -> dict[tuple[str, int], float]:
    points = json.loads(SWEEP.read_text())["results"]["ldsm_form"]["points"]
    return {(p["kernel"], p["warps_per_sm"]): p["cycles_per_warp_kstep"] for p in points
            if p.get("cycles_per_warp_kstep") is not None}


def _cycles_per_kstep(profile, name: str, warps: int = WARPS) -> float:
    """The tile kernel's k-step: each warp multiplies its own MT m16 rows (A from shared memory or registers)
    by all 16 x NT2 columns of B, KSTEPS times; the warps stacked along m (one block per SM)."""
    mt, nt2, a_from, _ = TILE_KERNELS[name]
    a_level = RMEM if a_from == "regs" else SMEM

    def program(cta):
        yield Gemm("acc", "a", "b", 16 * mt * warps, 16 * nt2, 16 * KSTEPS, a_level, SMEM, "mma_sync", "bf16", warps,
                   split=f"{warps}x1")

    kernel = Kernel(name, [(0, 0, 0)], (Role("warps", warps, program),), 0, 64)
    gpu = Gpu(profile, 1)
    cycles, _, _ = gpu.run_kernel(kernel, lambda: {}, extrapolate=False)
    fixed = gpu.launch_fixed_cycles() + profile.cta_launch_cycles + profile.mma_sync_latency_cycles
    return (cycles - fixed) / KSTEPS


@pytest.mark.parametrize("name", list(TILE_KERNELS))
def test_simulated_kernel_ksteps_take_the_measured_cycles(name):
    measured = _measured()[name, WARPS]
    assert _cycles_per_kstep(load_profile("h200"), name) == pytest.approx(measured, rel=0.05)


def test_full_overlap_is_too_fast_where_loads_and_products_are_even():
    """The backward's 32 x 32 k-step and the forward's S at BN 64: loads alone and products alone are close,
    and the longer alone misses the measurement by more than the fitted form does."""
    h200 = load_profile("h200")
    overlapped = dataclasses.replace(h200, mma_sync_ldsm_unhidden_fraction=0.0)
    for name in ("tile_bwd_nn_32x32", "tile_fwd_s_bn64"):
        measured = _measured()[name, WARPS]
        alone = _cycles_per_kstep(overlapped, name)
        modelled = _cycles_per_kstep(h200, name)
        assert alone < 0.96 * measured
        assert abs(modelled / measured - 1) < abs(alone / measured - 1) / 2


def test_the_unhidden_part_goes_to_the_longer_of_loads_and_products():
    p = dataclasses.replace(load_profile("h200"), mma_sync_ldsm_unhidden_fraction=0.1)
    bw = p.smem_bandwidth_bytes_per_clk_per_sm
    # loads the longer (200 cycles against 100 of products): the port is held 10 cycles more
    tensor, smem = _ldsm_unhidden(100.0, round(200 * bw), 1.0, p)
    assert tensor == 100.0 and smem == round(200 * bw) + round(10 * bw)
    # products the longer (at half the pipe 2 x 100 cycles, against 50 of loads): 5 cycles at that share
    tensor, smem = _ldsm_unhidden(100.0, round(50 * bw), 0.5, p)
    assert smem == round(50 * bw) and tensor == pytest.approx(100.0 + 5 * 0.5)


def test_fraction_is_at_most_one():
    from flashsim.errors import FlashsimError

    with pytest.raises(FlashsimError):
        dataclasses.replace(load_profile("h200"), mma_sync_ldsm_unhidden_fraction=1.5)


def test_calibrate_turns_the_sweep_into_the_profiles_fraction():
    from flashsim.experiments.calibrate import to_params

    fraction, source = to_params(json.loads(SWEEP.read_text()))["mma_sync_ldsm_unhidden_fraction"]
    assert source.startswith("measured:")
    assert 0.02 < fraction < 0.2
    assert load_profile("h200").mma_sync_ldsm_unhidden_fraction == pytest.approx(fraction, abs=0.001)
