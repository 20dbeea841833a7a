"""Stores of O from accumulator fragments: the microbenchmark's rate in the profile, and the form's cost."""

import json
from pathlib import Path

import pytest
from flashsim.algorithms.mapping import Tiling
from flashsim.algorithms.problem import Problem
from flashsim.errors import FlashsimError
from flashsim.experiments.calibrate import to_params
from flashsim.hw_profiles import load_profile
from flashsim.simulator import simulate

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200" / "session15" / "frag-store-sms"


def test_profile_rates_are_the_microbenchmarks():
    """The h200's two keys are what `flashsim calibrate --only frag_store_sms` measured: each SM stores
    fragments at one rate while few SMs store, and all of them together at the chip's, which binds (the rate
    per SM falls once most SMs store); coalesced stores move 3x as much either way."""
    report = json.loads((RESULTS / "frag-store-sms.json").read_text())
    params, h200 = to_params(report), load_profile("h200")
    for key in ("fragment_store_bytes_per_clk_per_sm", "fragment_store_chip_bytes_per_s"):
        value, source = params[key]
        assert value == getattr(h200, key) and source.startswith("measured")
    pts = {(p["blocks"], p["form"]): p for p in report["results"]["frag_store_sms"]["points"]}
    few = [pts[n, "fragments"]["bytes_per_clk_per_sm"] for n in (8, 16, 33, 66)]
    assert max(few) < 1.05 * min(few)
    assert pts[132, "fragments"]["bytes_per_clk_per_sm"] < 0.6 * min(few)
    assert all(pts[n, "coalesced"]["bytes_per_clk_per_sm"] > 3 * pts[n, "fragments"]["bytes_per_clk_per_sm"]
               for n, _ in pts)


def test_o_store_form_is_checked_and_described():
    with pytest.raises(FlashsimError, match="o_store"):
        Tiling(128, 128, 12, o_store="shared")
    t = Tiling(128, 128, 12, o_store="fragments")
    assert t.as_dict()["o_store"] == "fragments" and "o_store" not in Tiling(128, 128, 12).as_dict()
    assert "fragments" in t.describe()


def test_fragment_stores_cost_the_store_paths():
    """Short causal tiles store O often: from fragments the warps wait for the SM's store path and the chip's
    partial-write rate; halving either makes them slower still, while the TMA form uses neither."""
    prob = Problem(2, 16, 256, 128, causal=True)
    h200 = load_profile("h200")
    slow_sm = h200.with_overrides({"fragment_store_bytes_per_clk_per_sm": 2.0})
    slow_chip = h200.with_overrides({"fragment_store_chip_bytes_per_s": 0.2e12})

    def cycles(profile, form):
        return simulate("v3", prob, profile, Tiling(128, 128, 12, o_store=form)).cycles

    tma, frag = cycles(h200, "tma"), cycles(h200, "fragments")
    assert frag > tma
    assert cycles(slow_sm, "fragments") > frag and cycles(slow_chip, "fragments") > frag
    assert cycles(slow_sm, "tma") == tma == cycles(slow_chip, "tma")


def test_cli_takes_the_form_for_v3_only(capsys):
    from flashsim import cli

    argv = ["simulate", "--hw", "h200", "--algo", "v3", "--batch", "1", "--heads", "4", "--seqlen", "512",
            "--headdim", "128", "--json"]  # fmt: skip
    assert cli.main([*argv, "--o-store", "fragments"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tiling"]["o_store"] == "fragments"
    assert cli.main(["simulate", "--hw", "h200", "--algo", "v2", "--batch", "1", "--heads", "4", "--seqlen", "512",
                     "--headdim", "128", "--o-store", "fragments"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--o-store applies to v3" in err[0]


def test_validate_names_the_form_for_our_fragment_storing_kernels_only():
    """`validate` simulates our v3 kernels' rows with O stored from fragments, as they store it, on the tiles
    they ran (`--o-store tma`: FA3's form); the other implementations' rows keep their tilings."""
    from flashsim.experiments.prediction_inputs import ran_tiling

    cfg = {"batch": 2, "heads": 16, "kv_heads": 16, "seqlen_q": 1024, "seqlen_k": 1024, "headdim": 128,
           "causal": False, "dtype": "bf16"}  # fmt: skip
    ran = {"block_m": 128, "block_n": 176, "warps": 12, "stages": 2}
    ours = {"impl": "v3", "algo": "v3", "config": cfg, "tiling": ran}
    assert ran_tiling(ours) == ran_tiling(ours, "fragments") == {**ran, "o_store": "fragments"}
    assert ran_tiling(ours, "tma") == ran
    v2 = {"impl": "v2", "algo": "v2", "config": cfg, "tiling": {"block_m": 128, "block_n": 64, "warps": 4}}
    assert ran_tiling(v2, "fragments") == ran_tiling(v2)
    cudnn = {"impl": "sdpa-cudnn", "algo": "v3", "config": cfg}
    assert "o_store" not in (ran_tiling(cudnn, "fragments") or {})


def test_a_head_sample_stores_as_the_whole_chip_does():
    """Causal blocks drift apart, so a sample's SMs stand for no copies in the chip's partial-write port (copies
    would store in lockstep with them: 7.8% slower than the whole chip here); equal blocks run in lockstep waves,
    and there they do (without copies this sample comes out 1.6% fast)."""
    h200 = load_profile("h200")
    for prob, t in ((Problem(8, 48, 512, 128, causal=True, kv_heads=6), Tiling(128, 128, 12, o_store="fragments")),
                    (Problem(5, 64, 512, 128, seqlen_k=2315, kv_heads=8), Tiling(128, 176, 12, o_store="fragments"))):
        sample = simulate("v3", prob, h200, t, small_whole_chip=False)
        assert sample.sim["sms_simulated"] < h200.sm_count
        chip = simulate("v3", prob, h200, t, sms=None)
        assert abs(sample.cycles / chip.cycles - 1) < (0.05 if prob.causal else 0.01)
