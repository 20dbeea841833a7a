"""The wgmma_shape sweep: its Python side agrees with its CUDA source, it covers every wgmma form our v3 kernels
issue, and the model's premise holds on its H200 measurement (experiments/results/h200/session12/wgmma-shape/):
one wgmma rate per dtype, whatever the instruction's N, operand source or swizzle width."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from flashsim.experiments import calibrate_wgmma as cw
from flashsim.hw_profiles.loader import load_profile
from flashsim.kernels import hopper_tiles, hopper_wgmma_gen

ROOT = Path(cw.__file__).resolve().parents[1]
SOURCE = ROOT / "kernels" / "microbench" / "wgmma_shape.cu"
MEASURED = ROOT / "experiments" / "results" / "h200" / "session12" / "wgmma-shape" / "wgmma-shape.json"


def _defined() -> set[str]:
    src = SOURCE.read_text()
    names = {f"wg_ss_n{n}_w{w}" for n in re.findall(r"^SS_ALL_W\((\d+)\)", src, re.M) for w in (128, 64, 32)}
    names |= {f"wg_rs_n{n}_w{w}" for n, w in re.findall(r"^WG_SHAPE\(rs, (\d+), (\d+), true\)", src, re.M)}
    return names


def test_every_swept_kernel_is_defined_and_every_defined_one_is_swept():
    assert set(cw.kernels()) == _defined()


def test_shapes_parse_back_from_names():
    s = cw.shape("wg_rs_n96_w64")
    assert (s["form"], s["n"], s["swizzle_bytes"], s["flops"]) == ("rs", 96, 64, 2 * 64 * 96 * 16)
    with pytest.raises(ValueError):
        cw.shape("wgmma_bf16")


def test_the_sweep_covers_every_16bit_v3_tile():
    """Every block_n (the QK^T instruction's N) and head dim (the PV instruction's N) of the 16-bit v3 tiles,
    at the panel width the kernel reads them with (128 bytes where a row holds 128, else 64)."""
    swept = {(s["form"], s["n"], s["swizzle_bytes"]) for s in map(cw.shape, cw.kernels())}
    for row in hopper_tiles.tiles("v3"):
        width = next(w for w in (128, 64, 32) if (row.headdim * 2) % w == 0)  # v3_mainloop.cuh's QK_W
        assert ("ss", row.block_n, width) in swept, row
        if row.headdim in hopper_wgmma_gen.RS_N:
            assert ("rs", row.headdim, width) in swept, row


def test_measured_rates_are_one_rate():
    """On the H200 every form reaches the m64n256 rate the profile holds within 3% at its best warpgroup
    count: the model's single wgmma rate per dtype leaves out no shape or layout effect."""
    points = json.loads(MEASURED.read_text())["results"]["wgmma_shape"]["points"]
    best = cw.table(points)
    assert len(best) == len(cw.kernels())
    rate = load_profile("h200").wgmma_bf16_flops_per_clk_per_sm
    for key, value in best.items():
        assert abs(value / rate - 1) < 0.03, (key, value, rate)
