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

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200" / "session14" / "frag-store"


def test_profile_rate_is_the_microbenchmarks():
    """The h200's key is what `flashsim calibrate --only frag_store` measured, and fragments were 4x slower
    than the same bytes stored coalesced."""
    report = json.loads((RESULTS / "frag-store.json").read_text())
    fs = report["results"]["frag_store"]
    pts = {(p["where"], p["warps"], p["form"]): p["bytes_per_clk_per_sm"] for p in fs["points"]}
    fs["fragments_bytes_per_clk_per_sm"] = pts["hbm", 8, "fragments"]  # the kernel's case
    value, source = to_params(report)["fragment_store_bytes_per_clk_per_sm"]
    assert value == load_profile("h200").fragment_store_bytes_per_clk_per_sm
    assert source.startswith("measured")
    assert all(pts[w, n, "coalesced"] > 3 * pts[w, n, "fragments"] for w in ("l2", "hbm") for n in (4, 8, 16))


def test_o_store_form_is_checked_and_described():
    with pytest.raises(FlashsimError, match="o_store"):
        Tiling(128, 128, 12, o_store="shared")
    t = Tiling(128, 128, 12, o_store="fragments")
    assert t.as_dict()["o_store"] == "fragments" and "o_store" not in Tiling(128, 128, 12).as_dict()
    assert "fragments" in t.describe()


def test_fragment_stores_cost_the_store_path():
    """Short causal tiles store O often: from fragments the warps wait for the SM's store path; halving its rate
    makes them slower still, while the TMA form does not use it."""
    prob = Problem(2, 16, 256, 128, causal=True)
    h200 = load_profile("h200")
    slow = h200.with_overrides({"fragment_store_bytes_per_clk_per_sm": 2.2})

    def cycles(profile, form):
        return simulate("v3", prob, profile, Tiling(128, 128, 12, o_store=form)).cycles

    tma, frag = cycles(h200, "tma"), cycles(h200, "fragments")
    assert frag > tma
    assert cycles(slow, "fragments") > frag
    assert cycles(slow, "tma") == tma


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
