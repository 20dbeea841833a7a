"""The GEMM replay (experiments/gemm_replay.py): an ldmatrix-fed mma.sync GEMM's warps replayed instruction by
instruction against the ldsm_form sweep's measured tiles, and the SASS order reader behind it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashsim.experiments.gemm_replay_fit import (
    AHEAD,
    kernel_gemms,
    loop_kstep,
    rates,
    shipped_form,
    tile,
)
from flashsim.experiments.sass_orders import functions, gemm_orders, loop_order, ncu_function
from flashsim.hw_profiles import load_profile
from flashsim.simulator.gemm_replay import issue_order, program, replay, warp_tile

RESULTS = Path(__file__).resolve().parents[1] / "experiments/results/h200"
ORDERS = RESULTS / "gemm-replay"
SWEEP = RESULTS / "session16/ldsm-fill/calibration.json"
LATENCY = 29.5  # gemm-replay.md's fit
PORT, HMMA = rates(load_profile("h200"))


def _tile_points() -> list[dict]:
    points = json.loads(SWEEP.read_text())["results"]["ldsm_form"]["points"]
    return [p for p in points if p["kind"] == "tile" and p.get("cycles_per_warp_kstep")]


def test_one_latency_replays_every_measured_tile_within_five_percent():
    orders = json.loads((ORDERS / "ldsm-form-tile-orders.json").read_text())
    points = _tile_points()
    assert len(points) == 38
    errors = [loop_kstep(orders[p["kernel"]], tile(p["kernel"]), p["warps_per_sm"], PORT, HMMA, LATENCY)
              / p["cycles_per_warp_kstep"] - 1 for p in points]
    assert max(map(abs, errors)) < 0.05
    assert (sum(e * e for e in errors) / len(errors)) ** 0.5 < 0.03


@pytest.mark.parametrize("name", ["tile_fwd_s_m16_bn64", "tile_fwd_pv_m16_d128"])
def test_sixteen_row_tiles_at_one_warp_per_scheduler_hide_what_the_closed_form_charges(name):
    """d256's warp tiles at 4 warps per SM: the closed form (loads alone + L per k-step) is over 20% slow, the
    replay of their SASS order within 3%: the loads queue at the port and their latency hides behind it."""
    order = json.loads((ORDERS / "ldsm-form-tile-orders.json").read_text())[name]
    measured = next(p["cycles_per_warp_kstep"] for p in _tile_points()
                    if p["kernel"] == name and p["warps_per_sm"] == 4)
    assert shipped_form(tile(name), 4, PORT, HMMA) > 1.2 * measured
    assert loop_kstep(order, tile(name), 4, PORT, HMMA, LATENCY) == pytest.approx(measured, rel=0.03)


def test_generated_orders_replay_close_to_the_kernels_own():
    """Our v2 and SDPA flash's forward GEMMs (S and P V) at one and two blocks per SM."""
    rows = [r for r in kernel_gemms(ORDERS, PORT, HMMA, LATENCY, AHEAD) if not r["kernel"].startswith("flashsim_v1")]
    assert len(rows) >= 40
    assert all(abs(r["generated_order"] / r["sass_order"] - 1) < 0.11 for r in rows)


def test_replay_meets_the_bounds_of_its_resources():
    shape = (2, 4, 8, True)  # a warp's 32 x 64 tile over 8 k-steps, A and B loaded
    prog = program(issue_order(*shape, AHEAD), *shape)
    loads = 8 * (2 + 4) * PORT  # one warp's loads through the port
    products = 8 * 2 * 2 * 4 * HMMA
    for warps in (4, 8, 16):
        cycles = replay(prog, warps, PORT, HMMA, LATENCY)
        assert cycles >= max(loads * warps, products * -(-warps // 4))
    # no latency and one resource clearly the busier: that one's time (port: d256's S; pipes: P V with P held)
    for busy_port, free_shape in ((True, (1, 4, 16, True)), (False, (2, 8, 4, False))):
        mt, nt2, ksteps, a_smem = free_shape
        alone = 8 * ksteps * (mt * a_smem + nt2) * PORT if busy_port else 2 * ksteps * 2 * mt * nt2 * HMMA
        free = replay(program(issue_order(*free_shape, AHEAD), *free_shape), 8, PORT, HMMA, 0.0)
        assert free == pytest.approx(alone, rel=0.03)
    # loads one ahead of their products: the latency shows each k-step, less with more warps per scheduler
    near = program(issue_order(*shape, 1), *shape)
    slow = [replay(near, w, PORT, HMMA, 60.0) - replay(near, w, PORT, HMMA, 0.0) for w in (4, 8, 16)]
    assert slow[0] > 8 * 30 and slow[0] > slow[1] > slow[2] >= 0
    # kept far enough ahead, only the first load's latency is left
    assert replay(prog, 4, PORT, HMMA, 60.0) - replay(prog, 4, PORT, HMMA, 0.0) == pytest.approx(60, abs=2)


def test_issue_order_never_runs_a_product_before_its_loads():
    for shape in [(1, 4, 16, True), (2, 8, 4, False), (2, 2, 8, True)]:
        for ahead in (1, 3, 8, 1000):
            order = issue_order(*shape, ahead)
            issued = 0
            for need in program(order, *shape):
                if need < 0:
                    issued += 1
                else:
                    assert need < issued
            if ahead >= 1000:
                assert order == "L" * order.count("L") + "m" * order.count("m")


def test_an_order_must_fit_its_tile():
    with pytest.raises(ValueError, match="does not fit"):
        program("LLmm", 1, 2, 1, True)


def test_warp_tile_deals_the_product_as_the_split_says():
    assert warp_tile(128, 64, 128, 4, "m", True, 16) == (2, 4, 8, True)  # split-Q: 32 rows each
    assert warp_tile(16, 128, 128, 4, "n", True, 16) == (1, 2, 8, True)  # V1's S: 32 key columns each
    assert warp_tile(16, 128, 128, 4, "k", False, 16) == (1, 8, 2, False)  # V1's P V: a quarter of k each
    assert warp_tile(64, 64, 128, 8, "2x4", True, 16) == (2, 1, 8, True)
    assert warp_tile(16, 64, 64, 4, "m", True, 16) is None  # 4 rows a warp: no whole m16 tile


CUOBJDUMP = """
        Function : tile_x
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDSM.16.M88.4 R4, [R48] ;
        /*0020*/                   HMMA.16816.F32.BF16 R12, R4.reuse, R44, R12 ;
        /*0030*/              @!P0 BRA 0x10 ;
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0050*/                   LDSM.16.M88.4 R8, [R48] ;
        /*0060*/                   LDSM.16.M88.4 R16, [R48] ;
        /*0070*/                   HMMA.16816.F32.BF16 R12, R8, R16, R12 ;
        /*0080*/                   EXIT ;
"""


def test_sass_orders_read_loops_and_gemm_stretches():
    instrs = functions(CUOBJDUMP)["tile_x"]
    assert loop_order(instrs) == "Lm"
    assert gemm_orders(instrs) == ["Lm", "LLm"]


def test_sass_orders_read_nsight_computes_source_page():
    page = '"Kernel Name","k<1>",\n"Address","Source","# Samples"\n' + "\n".join(
        f'"0x{a:x}","{s}","0"' for a, s in [(0x10, "      LDSM.16.M88.4 R4, [R8]"), (0x20, "@P0   BRA 0x40"),
                                           (0x30, "      HMMA.16816.F32.BF16 R12, R4, R6, R12"),
                                           (0x40, "      LDSM.16.MT88.4 R4, [R8]"),
                                           (0x50, "      HMMA.16816.F32.BF16 R12, R4, R6, R12")])
    assert gemm_orders(ncu_function(page)["k<1>"]) == ["mLm"]  # the stretch before the branch has no products
