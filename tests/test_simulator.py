"""The timing model: roofline, determinism, sampling against the whole-chip run, sanity against the papers,
and the command-line contracts."""

from __future__ import annotations

import json

import pytest
from flashsim import cli
from flashsim.algorithms.problem import Problem
from flashsim.hw_profiles import load_profile
from flashsim.simulator import api, sampling, simulate
from flashsim.simulator.api import head_sample
from flashsim.simulator.sampling import HeadSample

H100 = load_profile("h100")
A100 = load_profile("a100")
H200 = load_profile("h200")
SMALL = dict(batch=2, heads=8, seqlen_q=1024, headdim=64)


def _p(algo: str, **kw) -> Problem:
    kw.setdefault("dtype", "fp8" if algo == "v3-fp8" else "bf16")
    return Problem(**kw)


@pytest.mark.parametrize("algo", ["standard", "v1", "v2", "v3", "v3-fp8"])
@pytest.mark.parametrize("causal", [False, True])
def test_never_faster_than_roofline(algo, causal):
    r = simulate(algo, _p(algo, causal=causal, **SMALL), H100)
    assert r.time_s >= r.roofline_time_s
    assert r.cycles > 0 and r.bytes["hbm_read"] > 0


def test_same_inputs_same_cycles():
    p = Problem(2, 16, 2048, 128, causal=True)
    a, b = simulate("v3", p, H100), simulate("v3", p, H100)
    assert (a.cycles, a.bytes) == (b.cycles, b.bytes)


@pytest.mark.parametrize("algo", ["v2", "v3"])
@pytest.mark.parametrize("causal,tolerance", [(False, 0.05), (True, 0.15)])
def test_sampled_run_close_to_whole_chip(monkeypatch, algo, causal, tolerance):
    """Where the chip is not copies of the sample (here: 64 heads of 16 blocks on 132 SMs), sampling whole K/V
    heads is an approximation: bound its error (test_shortcuts.py has the exact cases). Causal grids are
    looser: blocks of unequal length leave a tail that a smaller machine fills differently. (By default a grid
    this small runs whole-chip: sampled here all the same.)"""
    monkeypatch.setattr(api, "WHOLE_CHIP_WORK", 0)
    p = Problem(4, 16, 2048, 64, causal=causal)
    full = simulate(algo, p, H100, sms=None, extrapolate=False)
    sampled = simulate(algo, p, H100, extrapolate=False)
    assert sampled.sim["sms_simulated"] < H100.sm_count
    assert sampled.time_s == pytest.approx(full.time_s, rel=tolerance)
    assert sampled.bytes["hbm_read"] == pytest.approx(full.bytes["hbm_read"], rel=0.05)


def test_small_grids_run_whole_chip():
    r = simulate("v2", Problem(**SMALL), H100)
    assert r.sim["sms_simulated"] == H100.sm_count


@pytest.mark.parametrize("groups,sms", [(16, 8), (64, 8), (512, 8), (3, 8)])
def test_head_sample_matches_share(groups, sms):
    """Without the grid's shape the fallback takes the share: the SMs nearest the sampled heads' share."""
    s = head_sample(groups, 132, sms)
    assert 1 <= s.g <= groups
    assert s.n >= min(sms, round(s.g * 132 / groups))
    assert abs(s.n - s.g * 132 / groups) <= 0.5 + 1e-9


@pytest.mark.parametrize(
    "shape,g,n",
    [
        ((512, 132, 8, 4, 2), 31, 8),  # 4-block heads, 2 per SM: 8 SMs hold 4 whole heads; 31/512 is 8/132
        ((128, 132, 8, 16, 2), 31, 32),  # 16-block heads: grows to 32 SMs, a wave of 4 heads and the share
        ((64, 132, 8, 32, 1, 8, 16.0), 16, 33),  # sections of 8 heads: 2 sampled heads in each of the 8
    ],
)
def test_head_sample_grows_to_whole_head_waves_and_the_share(shape, g, n):
    s = head_sample(*shape)
    assert (s.g, s.n) == (g, n) and s.representative and s.whole_waves
    assert abs(s.share_error) <= 0.01


def test_head_sample_of_long_heads_says_it_is_not_representative():
    """One 128-block head per 64 SMs: no affordable sample holds whole heads; the fallback (the old rule)
    takes 1 of 16 heads on 8 SMs and flags it."""
    s = head_sample(16, 132, 8, 128, 2, steps_per_block=128)
    assert (s.g, s.n) == (1, 8) and not s.representative and not s.whole_waves
    assert "waves cut heads" in s.describe()


def test_a_few_wave_sample_ends_its_last_wave_as_deep_as_the_chip():
    """42 heads of 16 equal blocks on 132 SMs of two slots: 2.55 waves, the last 144 blocks, so 12 SMs hold two
    and the launch ends a whole wave's time after that wave starts. A sample of 4 heads on 13 SMs (64 blocks:
    a last wave of 12 blocks, one an SM, ending in about half that time) came out 15% short of the chip; the
    sample now takes 6 heads on 19 SMs (a last wave of 20 blocks on 19 SMs). Causal blocks, or more than
    SAME_DEPTH_UP_TO waves, keep the earlier choice."""
    assert sampling._tail_depth(672, 132, 2) == 2 and sampling._tail_depth(64, 13, 2) == 1
    s = head_sample(42, 132, 8, 16, 2, steps_per_block=100.0)
    assert (s.g, s.n) == (6, 19) and sampling._tail_depth(s.g * 16, s.n, 2) == 2
    causal = head_sample(42, 132, 8, 16, 2, steps_per_block=50.0, unequal_blocks=True)
    assert (causal.g, causal.n) == (4, 13)
    many = head_sample(336, 132, 8, 16, 2, steps_per_block=100.0)  # 21 waves: the depth is not asked
    assert sampling._waves(336 * 16, 132, 2) > sampling.SAME_DEPTH_UP_TO and (many.g, many.n) == (21, 8)


def test_a_few_wave_sample_follows_the_chip_to_its_last_wave():
    """End to end (h200 v2, 3 x 14 heads of 2k at d128, 672 blocks): the sample's cycles within 1% of the whole
    chip's (15% short with the sample whose last wave held one block an SM). The default runs this grid
    whole-chip (api.LOCKSTEP_WORK_FACTOR); the sample it would take is asked for here."""
    problem = Problem(3, 14, 2048, 128)
    sampled = simulate("v2", problem, H200, small_whole_chip=False)
    whole = simulate("v2", problem, H200, sms=None)
    assert sampled.sim["sms_simulated"] == 19
    assert sampled.cycles == pytest.approx(whole.cycles, rel=0.01)


def test_a_sample_whose_time_follows_its_work_is_timed_by_its_share():
    """Heads interleaved in sections, causal blocks (v3's causal order): the time follows the work per SM, so
    a sample with 4 of 32 heads on 17 of 132 SMs (2.9% less work per SM than the chip) is stretched by the
    chip's work per SM over its own; otherwise (heads one after another, or equal blocks in waves) the cycles
    stay as simulated."""
    follows = HeadSample(4, 17, 32, 132, whole_waves=False, follows_work=True)
    assert follows.share_error == pytest.approx(4 * 132 / (17 * 32) - 1)
    assert follows.time_scale == pytest.approx(17 * 32 / (4 * 132)) and follows.time_scale > 1
    assert HeadSample(4, 17, 32, 132, whole_waves=False).time_scale == 1.0
    # only sections of causal blocks follow their work
    assert head_sample(64, 132, 8, 32, 1, 8, 16.0, unequal_blocks=True).follows_work
    assert not head_sample(64, 132, 8, 32, 1, 8, 16.0).follows_work
    assert not head_sample(64, 132, 8, 32, 1, 1, 16.0, unequal_blocks=True).follows_work


def test_chip_waves_that_cut_heads_are_a_kind_of_their_own():
    """Equal blocks, heads one after another: where the chip's slots hold no whole number of heads (264 slots of
    16-block heads) a sample is reported as that kind with its wider bound, even when its own waves hold whole
    heads; causal blocks or slots of whole heads (264 of 4-block heads) keep the representative kind."""
    cut = head_sample(128, 132, 8, 16, 2)
    assert cut.representative and cut.chip_cuts_heads and cut.kind == "chip's waves cut heads"
    assert "the chip's waves cut heads" in cut.describe()
    whole = head_sample(512, 132, 8, 4, 2)
    assert whole.representative and not whole.chip_cuts_heads and whole.kind == "representative"
    assert not head_sample(128, 132, 8, 16, 2, unequal_blocks=True).chip_cuts_heads
    assert sampling.BOUNDS[cut.kind] > 2 * sampling.BOUNDS[whole.kind]
    assert sampling.sample_info(cut)["bound"] == sampling.BOUNDS["chip's waves cut heads"]


def test_grids_of_little_work_run_whole_chip():
    """At most WHOLE_CHIP_WORK block steps (128 x 128: 512 heads of 4 blocks of 8 K/V steps) run on the whole
    chip whatever their wave count (here 7.8 waves), and equal blocks (not causal) up to LOCKSTEP_WORK_FACTOR
    times that; past those, a grid is sampled."""
    from flashsim.algorithms.schedules import build
    from flashsim.algorithms.tiling import resolve_tiling

    def machine(p):
        return api._machine(H100, p, build("v2", p, resolve_tiling("v2", p, H100)), 8, None)

    assert machine(Problem(32, 16, 512, 128)).n_sms == H100.sm_count
    assert machine(Problem(32, 16, 512, 128, causal=True)).n_sms == H100.sm_count
    assert machine(Problem(32, 16, 1024, 128, causal=True)).n_sms < H100.sm_count  # twice the work
    assert machine(Problem(32, 16, 1024, 128)).n_sms == H100.sm_count  # 4x, equal blocks
    assert machine(Problem(32, 16, 2048, 128)).n_sms < H100.sm_count  # 16x


def test_the_sample_and_its_bound_are_reported(capsys):
    p = Problem(16, 16, 2048, 128)
    r = simulate("v2", p, H100)
    sample = r.sim["sample"]
    assert sample["sms"] == r.sim["sms_simulated"] < H100.sm_count and sample["of_heads"] == 256
    assert sample["representative"] and sample["bound"] > 0
    assert cli.main(["simulate", "--algo", "v2", "--hw", "h100", "-b", "16", "--heads", "16", "-n", "2048",
                     "-d", "128"]) == 0
    assert "head sample: " in capsys.readouterr().out
    # a whole-chip run has no sample (a small problem: the grid point on every SM takes a minute)
    assert simulate("v2", Problem(1, 4, 1024, 128), H100, sms=None).sim.get("sample") is None


def test_k_v_reuse_hits_l2():
    """Re-reads of a head's K/V by its other Q blocks hit L2: HBM reads stay near the compulsory bytes."""
    p = Problem(4, 16, 4096, 128)
    r = simulate("v2", p, H100)
    compulsory = 3 * p.batch * p.heads * p.seqlen_q * p.headdim * p.elem_bytes
    assert r.bytes["l2_read"] > 10 * compulsory
    assert r.bytes["hbm_read"] < 1.5 * compulsory


def test_standard_spills_s_and_p_to_hbm():
    p = Problem(4, 16, 4096, 64)
    r = simulate("standard", p, H100)
    s_bytes = p.batch * p.heads * p.seqlen_q * p.seqlen_k * p.elem_bytes
    assert r.bytes["hbm_write"] + r.bytes["hbm_write_back_after"] > s_bytes  # S and P written, mostly evicted
    assert r.bound_by == "hbm"


# -- sanity against published results (generous bounds) --------------------------------------------------


def test_standard_slower_than_v2_at_4k():
    p = Problem(4, 16, 4096, 128)
    assert simulate("standard", p, H100).time_s >= 1.5 * simulate("v2", p, H100).time_s


STANDARD_D128 = pytest.mark.xfail(
    strict=True,
    reason="the model puts our standard schedule 2.77x behind v2 at d128 on the H100; our kernels measured "
    "2.86x on the H200 (experiments/results/h200/validation.md, b4-h16-n4096-d128), so the 3x holds at d64 only",
)


@pytest.mark.parametrize("heads,headdim", [(32, 64), pytest.param(16, 128, marks=STANDARD_D128)])
def test_standard_at_least_3x_slower_than_v2_at_4k(heads, headdim):
    """Measured on the H200, our standard kernels ran 4.57x behind our v2 at d64 and 2.86x at d128."""
    p = Problem(4, heads, 4096, headdim)
    assert simulate("standard", p, H100).time_s >= 3 * simulate("v2", p, H100).time_s


def test_causal_v2_faster_than_non_causal_at_long_sequences():
    ratio = (
        simulate("v2", Problem(1, 16, 16384, 128), H100).time_s
        / simulate("v2", Problem(1, 16, 16384, 128, causal=True), H100).time_s
    )
    assert 1.5 <= ratio <= 2.0


def test_fp8_attention_beats_bf16_v3_and_its_prepass_decides_the_call():
    """Measured on the H200: the fp8 attention kernel beats bf16 v3's, but at d128 4k the quantisation pre-pass
    makes the whole call slower (855 against 831 us at B4 H16 N4096, experiments/results/h200/session35/
    fp8-kernel-times/); at d256 the GEMMs weigh more and fp8 wins the call (fp8/fp8-bench.md: 1.19-1.32x)."""
    h200 = load_profile("h200")

    def both(b, n, d):
        fp8 = simulate("v3-fp8", _p("v3-fp8", batch=b, heads=16, seqlen_q=n, headdim=d), h200)
        return fp8, simulate("v3", Problem(b, 16, n, d), h200)

    fp8, bf16 = both(4, 4096, 128)
    attention = fp8.kernels[-1]
    assert attention["cycles"] / attention["clock_hz"] < bf16.kernel_time_s < fp8.kernel_time_s
    fp8, bf16 = both(1, 16384, 256)
    assert fp8.kernel_time_s < bf16.kernel_time_s


@pytest.mark.parametrize("seqlen", [1024, 4096])
def test_v2_1_5_to_3x_faster_than_v1_on_a100(seqlen):
    """The FA2 paper's grid at head dim 64: v1 with the released FA1 kernel's tiles and splits (1.79x at 1k,
    2.10x at 4k; 1.89x and 2.13x at 2k and 8k, whose V1 runs take a minute more). (At head dim 128 the model
    puts v1 at 2.9-3.3x: its fp32 O round trips make it HBM-bound; docs/MODEL.md.) The 2k point came out 1.499x
    until the instruction-issue model issued V1's own instructions (its 16-row warp tiles' loads and softmax
    bookkeeping)."""
    p = Problem(16384 // seqlen, 32, seqlen, 64)
    ratio = simulate("v1", p, A100).time_s / simulate("v2", p, A100).time_s
    assert 1.5 <= ratio <= 3.0


# The FA3 paper's v3-over-v2 speedup at this shape. The model reached it (1.43x) once a wait issued after an
# asynchronous GEMM had finished stopped paying the GEMM's latency again; our kernels measured 1.74x on the H200
# (b4-h16-n4096-d128, validation.md), so part of what slows v2 is still missing.
def test_v3_over_v2_on_h100_matches_fa3_paper():
    p = Problem(4, 16, 4096, 128)
    ratio = simulate("v2", p, H100).time_s / simulate("v3", p, H100).time_s
    assert 1.4 <= ratio <= 2.2


# -- commands ----------------------------------------------------------------------------------------------

CONTRACT = {
    "algo",
    "hw",
    "problem",
    "tiling",
    "time_s",
    "cycles",
    "tflops",
    "bytes",
    "utilization",
    "bound_by",
    "roofline_time_s",
    "sim",
}


def test_simulate_json_contract(capsys):
    assert cli.main(["simulate", "--algo", "v2", "--seqlen", "1024", "--batch", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= CONTRACT
    assert {"hbm_read", "hbm_write", "l2_read", "l2_write", "smem_read", "smem_write"} <= set(out["bytes"])
    assert {"wall_s", "events"} <= set(out["sim"]) and out["sim"]["events"] > 0 and out["sim"]["ops"] > 0
    assert out["time_s"] >= out["roofline_time_s"]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["simulate", "--seqlen", "0"], "seqlen_q must be a positive integer"),
        (["simulate", "--algo", "v3", "--hw", "a100"], "needs tma and wgmma"),
        (["simulate", "--headdim", "100"], "head dim 100 is not supported"),
        (["simulate", "--block-m", "512", "--block-n", "512"], "shared memory"),
        (["simulate", "--hw", "nope"], "nope"),
        (["simulate", "--set", "bogus_key=1"], "bogus_key"),
        (["trace", "--seqlen", "65536", "--batch", "8"], "the trace would hold"),
        (["compare", "--algos", "v2", "--jobs", "0"], "--jobs must be at least 1"),
    ],
)
def test_bad_input_one_line_exit_2(argv, needle, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_trace_is_chrome_json(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert cli.main(["trace", "--algo", "v3", "--seqlen", "512", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    names = {e["name"] for e in data["traceEvents"] if e["ph"] == "X"}
    assert any(n.startswith("gemm") for n in names) and "softmax" in names
    tracks = {e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any("producer" in t for t in tracks) and any("tma" in t for t in tracks)


def test_trace_times_are_at_the_runs_clock(tmp_path, capsys):
    """An mma.sync kernel runs below the base clock (the profile's clock under tensor-core load): the trace's
    microseconds are its cycles at that clock, so the last interval ends with the kernel's blocks (its time
    less the launch's fixed busy time outside them), not 9% before."""
    out = tmp_path / "t.json"
    assert cli.main(["trace", "--hw", "h200", "--algo", "v2", "--seqlen", "512", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    kernel = data["metadata"]["kernels"][0]
    h200 = load_profile("h200")
    assert kernel["clock_hz"] < 0.95 * h200.sm_clock_hz
    last = max(e["ts"] + e["dur"] for e in data["traceEvents"] if e["ph"] == "X")
    blocks_us = kernel["cycles"] / kernel["clock_hz"] * 1e6 - h200.kernel_busy_overhead_s * 1e6
    assert last == pytest.approx(blocks_us, rel=0.03)


def test_compare_and_tour_json(tmp_path, capsys):
    assert (
        cli.main(
            ["compare", "--algos", "v2", "v3", "--seqlen", "1024", "--batch", "1", "--out", str(tmp_path), "--json"]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert [r["algo"] for r in out["results"]] == ["v2", "v3"]
    assert (tmp_path / "compare.png").exists()


def test_worker_processes_give_the_same_results(tmp_path, capsys):
    """compare/sweep/tour run their simulations in worker processes: same cycles, same order as in one."""
    runs = []
    for jobs in ("1", "2"):
        argv = ["compare", "--algos", "v3", "v2", "v1", "--seqlen", "512", "--batch", "1", "--out", str(tmp_path),
                "--json", "--jobs", jobs]
        assert cli.main(argv) == 0
        runs.append([(r["algo"], r["cycles"], r["bytes"]) for r in json.loads(capsys.readouterr().out)["results"]])
    assert runs[0] == runs[1] and [algo for algo, *_ in runs[0]] == ["v3", "v2", "v1"]


def test_sweep_writes_csv_and_plot(tmp_path, capsys):
    csv_path = tmp_path / "s.csv"
    assert (
        cli.main(
            [
                "sweep",
                "--algos",
                "v2",
                "--seqlens",
                "512",
                "1024",
                "--headdims",
                "64",
                "--causal",
                "off",
                "--batch",
                "2",
                "--heads",
                "4",
                "--csv",
                str(csv_path),
                "--out",
                str(tmp_path),
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 2 and csv_path.read_text().count("\n") == 3
    assert (tmp_path / "sweep.png").exists()


def test_v1_splits_from_the_command_line(capsys):
    """--splits gives V1 that many thread blocks per (batch, head), as our V1 kernel launches."""
    assert cli.main(["simulate", "--algo", "v1", "--splits", "4", "--seqlen", "1024", "--batch", "2",
                     "--heads", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tiling"]["splits"] == 4 and out["kernels"][0]["ctas"] == 2 * 4 * 4
