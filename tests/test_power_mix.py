"""The power_mix sweep's host side: nvidia-smi's samples are parsed and windowed as they come, and every mix
but the saturating mma.sync one asks for work that fits its period (so a point's shares are what its name
says; the points record the work they achieved and how far they overran the period)."""

from __future__ import annotations

import datetime as dt

from flashsim.experiments import calibrate_power as cp

SMI_TEXT = """2026/12/01 16:40:01.100, 1980, 114.50, 0x0000000000000000
2026/12/01 16:40:01.120, 1905, 486.00, 0x0000000000000004
garbage line
2026/12/01 16:40:01.140, 1815, 516.25, 0x0000000000000004
"""


def test_smi_samples_parse_and_window():
    rows = cp._smi_rows(SMI_TEXT)
    assert [r[1] for r in rows] == [1980.0, 1905.0, 1815.0]
    w = cp._window(rows, dt.datetime(2026, 12, 1, 16, 40, 1, 110000), dt.datetime(2026, 12, 1, 16, 40, 1, 150000))
    assert w["smi_samples"] == 2 and w["smi_clock_mhz"] == 1860.0 and w["smi_event_reasons"] == ["0x0000000000000004"]
    assert cp._window(rows, dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 2)) == {}


def test_mixes_fit_their_period():
    for kind, k, mufu, ffma in cp.POINTS:
        # wgmma m64n256k16 takes 128 cycles of the SM's tensor cores; mma.sync m16n8k16 6 per warp (4 warps)
        tensor_cycles = k * (128 if kind == "wgmma" else 6)
        saturating = kind == "mma_sync" and k == max(p[1] for p in cp.POINTS if p[0] == "mma_sync")
        assert tensor_cycles <= cp.PERIOD or saturating, (kind, k)
        # MUFU: 16 lanes per cycle per SM for 128 threads; FFMA: one instruction per cycle per warp
        assert 8 * mufu <= cp.PERIOD and ffma <= cp.PERIOD
        assert mufu % 8 == 0 and ffma % 8 == 0 and (kind == "wgmma" or k % 8 == 0)


def test_power_hbm_points_fit_their_period_and_the_hbm():
    """Each power_hbm point's tensor work fits the period (but the saturating mma.sync one), its loads come in
    whole rounds of 16 in flight, and the lightest read load stays well under the HBM's rate while the heaviest
    asks for more than it can give (so the sweep spans the HBM's range)."""
    hbm = 4.8e12
    period_s = cp.HBM_PERIOD / 1.98e9
    per_round = 16 * 132 * 128 * cp.HBM_STREAM_WARPGROUPS  # bytes the chip asks for with one load per thread
    rates = sorted({n * per_round / period_s for _, _, n in cp.HBM_POINTS if n})
    assert rates[0] < 0.5 * hbm < hbm < rates[-1]
    for kind, k, loads in cp.HBM_POINTS:
        assert loads % 16 == 0
        tensor_cycles = k * (128 if kind == "wgmma" else 6)
        saturating = kind == "mma_sync" and k == max(p[1] for p in cp.HBM_POINTS if p[0] == "mma_sync")
        assert tensor_cycles <= cp.HBM_PERIOD or saturating, (kind, k)


def test_burst_order_runs_every_mix_once_a_pass_in_shuffled_orders():
    """The shuffled grid (`--bursts --passes N --shuffle SEED`): every mix once in each pass, the passes in
    orders of their own, the same orders for the same seed; without a seed the listed order."""
    mixes = list(cp.HBM_POINTS)
    order = cp.burst_order(mixes, passes=3, seed=7)
    assert [n for n, _ in order] == [n for n in range(3) for _ in mixes]
    passes = [[m for n, m in order if n == p] for p in range(3)]
    assert all(sorted(p) == sorted(mixes) for p in passes)
    assert len({tuple(p) for p in passes}) > 1  # not one order repeated
    assert order == cp.burst_order(mixes, passes=3, seed=7)
    assert cp.burst_order(mixes) == [(0, m) for m in mixes]


def test_passes_and_shuffle_are_refused_without_bursts(capsys):
    import pytest

    for argv in (["--out", "x.json", "--passes", "2"], ["--out", "x.json", "--shuffle", "3"],
                 ["--out", "x.json", "--bursts", "--passes", "0"]):
        with pytest.raises(SystemExit) as exit_:
            cp.main(argv)
        assert exit_.value.code == 2
        assert "--passes" in capsys.readouterr().err
