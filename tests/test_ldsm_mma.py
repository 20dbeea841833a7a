"""ldmatrix-fed mma.sync: the calibrate ldsm_mma microbenchmark's own k-steps, simulated, take the cycles it
measured (experiments/results/h200/backward/profile/ldsm-mma.json), since the profile's share of the shared-memory
path held by the products comes from that measurement's loads-alone and products-alone times."""

from __future__ import annotations

import dataclasses

import pytest
from flashsim.algorithms.ir import RMEM, SMEM, Gemm, Kernel, Role
from flashsim.hw_profiles import load_profile
from flashsim.simulator.gpu import Gpu

WARPS, KSTEPS = 8, 256
MEASURED = {"both": 160.1, "loads": 128.1, "products": 96.4}  # cycles per warp k-step, H200
# The share those cycles imply (the h200 profile records it but runs with 0: see its source).
MEASURED_SHARE = (MEASURED["both"] - MEASURED["loads"]) / MEASURED["products"]


def _cycles_per_kstep(profile, *, loads: bool = True) -> float:
    """Each of 8 warps multiplies a 32 x 16 by a 16 x 32 bf16 tile per k-step, both read from shared memory
    (4 ldmatrix.x4 and 8 m16n8k16): one 256 x 32 product over the warps as a column of 8."""
    level = SMEM if loads else RMEM

    def program(cta):
        yield Gemm("acc", "a", "b", 32 * WARPS, 32, 16 * KSTEPS, level, level, "mma_sync", "bf16", WARPS,
                   split=f"{WARPS}x1")

    kernel = Kernel("ldsm_mma", [(0, 0, 0)], (Role("warps", WARPS, program),), 0, 32 * WARPS)
    gpu = Gpu(profile, 1)
    cycles, _, _ = gpu.run_kernel(kernel, lambda: {}, extrapolate=False)
    fixed = gpu.launch_fixed_cycles() + profile.cta_launch_cycles + profile.mma_sync_latency_cycles
    return (cycles - fixed) / KSTEPS


def test_simulated_ldsm_mma_step_takes_the_measured_cycles():
    h200 = dataclasses.replace(load_profile("h200"), mma_sync_smem_port_share=MEASURED_SHARE)
    assert _cycles_per_kstep(h200) == pytest.approx(MEASURED["both"], rel=0.10)
    assert _cycles_per_kstep(h200, loads=False) == pytest.approx(MEASURED["products"], rel=0.10)


def test_without_the_shared_path_loads_and_products_overlap_fully():
    h200 = dataclasses.replace(load_profile("h200"), mma_sync_smem_port_share=MEASURED_SHARE)
    overlapped = dataclasses.replace(h200, mma_sync_smem_port_share=0.0)
    loads_alone = 16 * 32 * 2 * 2 * WARPS / h200.smem_bandwidth_bytes_per_clk_per_sm
    assert _cycles_per_kstep(overlapped) == pytest.approx(loads_alone, rel=0.02)
    assert _cycles_per_kstep(overlapped) < 0.85 * _cycles_per_kstep(h200)


def test_share_is_a_fraction():
    from flashsim.errors import FlashsimError

    with pytest.raises(FlashsimError):
        dataclasses.replace(load_profile("h200"), mma_sync_smem_port_share=1.5)


def test_calibrate_turns_the_measurement_into_the_profiles_share():
    import json
    from pathlib import Path

    from flashsim.experiments.calibrate import to_params

    path = Path(__file__).resolve().parents[1] / "experiments/results/h200/backward/profile/ldsm-mma.json"
    report = json.loads(path.read_text())
    share, source = to_params(report)["mma_sync_smem_port_share"]
    assert share == pytest.approx(MEASURED_SHARE, abs=0.001)
    assert source.startswith("measured:")
    both = MEASURED["loads"] + share * MEASURED["products"]
    assert both == pytest.approx(MEASURED["both"], rel=0.01)
