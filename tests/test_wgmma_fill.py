"""TMA fills beside wgmma (calibrate --only wgmma_fill, experiments/results/h200/session30/wgmma-fill/): the sweep's
Python side matches its kernels, and the profiles' charge for a filled byte holds where wgmma fills the port."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from flashsim.experiments import calibrate_wgmma as cw
from flashsim.hw_profiles.loader import load_profile

ROOT = Path(cw.__file__).resolve().parents[1]
SOURCE = ROOT / "kernels" / "microbench" / "wgmma_shape.cu"
MEASURED = ROOT / "experiments" / "results" / "h200" / "session30" / "wgmma-fill" / "calibration.json"


def _points() -> list[dict]:
    return json.loads(MEASURED.read_text())["results"]["wgmma_fill"]["points"]


def test_every_swept_n_has_a_kernel_and_its_operand_bytes():
    assert {int(n) for n in re.findall(r"^WG_FILL\((\d+)\)", SOURCE.read_text(), re.M)} == set(cw.FILL_N)
    # A is 64 rows and B N rows, 16 bf16 of K each
    assert [cw._operand_bytes(n) for n in (64, 128)] == [4096, 6144]


def test_the_measurement_covers_the_sweep():
    points = _points()
    assert {(p["n"], p["warpgroups_per_sm"]) for p in points} == {
        (n, w) for n in cw.FILL_N for w in cw.WARPGROUPS_PER_SM}


def _port_bytes_per_clk(p: dict) -> float:
    return p["flops_per_clk_per_sm_alone"] / (2 * 64 * p["n"] * 16) * p["operand_bytes"]


@pytest.mark.parametrize("hw", ["h200", "h100"])
def test_fills_cost_wgmma_the_profiles_share_where_its_reads_fill_the_port(hw):
    """Where the chain reads at the port's rate (N 64, 2-3 warpgroups per SM), TMA fills cost it within 0.01 of
    the share the profile charges every filled byte; where the tensor cores bound it (N 128, 96 B/clk) they cost
    it nothing measurable."""
    profile = load_profile(hw)
    port = profile.smem_bandwidth_bytes_per_clk_per_sm
    for p in _points():
        if p["n"] == 64 and p["warpgroups_per_sm"] >= 2:
            assert _port_bytes_per_clk(p) >= 0.99 * port
            assert p["loss_per_filled_byte"] == pytest.approx(profile.smem_fill_port_fraction, abs=0.01)
        if p["n"] == 128:
            assert _port_bytes_per_clk(p) < 0.8 * port
            assert p["loss_per_filled_byte"] < 0.005
