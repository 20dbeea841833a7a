"""V3's ablation switches (warp specialisation, ping-pong, intra-warpgroup overlap): each combination still
computes attention and moves the same global bytes; the programs differ in roles, barriers and GEMM order;
the command line takes them for v3 and v3-fp8 only, and time is what they change."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch
from flashsim import cli
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.counting import count_io
from flashsim.algorithms.ir import Arrive, Gemm, GemmWait, Load, OnlineSoftmax, Wait
from flashsim.algorithms.numeric import run_numeric
from flashsim.algorithms.schedules import build
from flashsim.errors import FlashsimError
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import simulate

SWITCHES = ("warp_specialization", "pingpong", "intra_overlap")
COMBOS = [dict(zip(SWITCHES, on, strict=True)) for on in itertools.product((True, False), repeat=3)]
# 2 consumer warpgroups, a ragged last Q block (150 rows: the second block has one warpgroup) and K/V length
CASES = [(False, 1), (True, 1), (False, 2)]  # (causal, K/V splits)


def _problem(causal: bool, dtype: str = "fp32") -> Problem:
    return Problem(1, 2, 150, 32, seqlen_k=170, kv_heads=1, causal=causal, dtype=dtype)


def _inputs():
    g = torch.Generator().manual_seed(0)
    return {"Q": torch.randn(1, 2, 150, 32, generator=g), "K": torch.randn(1, 1, 170, 32, generator=g),
            "V": torch.randn(1, 1, 170, 32, generator=g)}


def _reference(x: dict, causal: bool) -> torch.Tensor:
    q, k, v = (x[n].double() for n in "QKV")
    k, v = k.expand(-1, 2, -1, -1), v.expand(-1, 2, -1, -1)
    s = q @ k.transpose(-1, -2) / math.sqrt(32)
    if causal:  # bottom-right aligned: row r sees keys 0 .. r + 20
        s = s.masked_fill(torch.ones(150, 170, dtype=torch.bool).triu(170 - 150 + 1), -math.inf)
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("causal, splits", CASES)
@pytest.mark.parametrize("switches", COMBOS, ids=lambda s: "-".join(k for k, v in s.items() if not v) or "all-on")
def test_every_combination_computes_attention_with_the_same_bytes(causal, splits, switches):
    p, x = _problem(causal), _inputs()
    t = Tiling(128, 32, 12, 2, splits=splits)
    schedule = build("v3", p, t, **switches)
    out = run_numeric(schedule, x)["O"]
    assert (out.double() - _reference(x, causal)).abs().max() < 1e-5
    default = build("v3", p, t)
    assert count_io(schedule).gmem_bytes == count_io(default).gmem_bytes
    # the accumulator sees the same products and rescales in the same order: bit for bit the default's output
    assert torch.equal(out, run_numeric(default, x)["O"])


@pytest.mark.parametrize("switch", SWITCHES)
def test_fp8_takes_the_switches(switch):
    p, x = _problem(False, "fp8"), _inputs()
    t = Tiling(128, 32, 12, 2)
    off = build("v3-fp8", p, t, **{switch: False})
    on = build("v3-fp8", p, t)
    assert torch.equal(run_numeric(off, x)["O"], run_numeric(on, x)["O"])
    assert count_io(off).gmem_bytes == count_io(on).gmem_bytes


def _ops(schedule, role: str, cta=(0, 0, 0)) -> list:
    kernel = schedule.kernels[0]
    return list(next(r for r in kernel.roles if r.name == role).program(cta))


def test_switches_change_roles_barriers_and_gemm_order():
    p, t = _problem(False), Tiling(128, 32, 12, 2)
    roles = [r.name for r in build("v3", p, t, warp_specialization=False).kernels[0].roles]
    assert roles == ["consumer0", "consumer1"]  # no producer: consumer 0 issues the K/V loads itself
    def loads(schedule, role):
        return sum(isinstance(op, Load) for op in _ops(schedule, role))

    plain = build("v3", p, t, warp_specialization=False)
    assert loads(plain, "consumer0") == 1 + 2 * 6  # its Q slice, then K and V of the 6 K/V blocks
    assert loads(plain, "consumer1") == 1  # its Q slice only
    assert loads(plain, "consumer0") + loads(plain, "consumer1") == loads(build("v3", p, t), "producer")

    def turns(**kw):
        return [op for op in _ops(build("v3", p, t, **kw), "consumer1")
                if isinstance(op, (Wait, Arrive)) and op.barrier.startswith("turn")]

    assert turns() and not turns(pingpong=False)

    def order(**kw):
        """What consumer 0 does at K/V step 1: GEMMs issued, then what it waits for before its softmax."""
        ops = _ops(build("v3", p, t, **kw), "consumer0")
        gemms = [i for i, op in enumerate(ops) if isinstance(op, Gemm)]
        softmax = [i for i, op in enumerate(ops) if isinstance(op, OnlineSoftmax)][1]
        return ([ops[i].dst for i in gemms[1:3]],
                [op.token for op in ops[gemms[2]:softmax] if isinstance(op, GemmWait)])

    assert order() == (["S", "acc"], ["s"])  # P_0 V_0 still runs under the softmax of S_1
    assert order(intra_overlap=False) == (["acc", "S"], ["o", "s"])  # nothing left to overlap


def test_each_switch_off_is_slower_on_h100():
    hw, p = load_profile("h100"), Problem(4, 16, 2048, 128, dtype="fp16")
    base = simulate("v3", p, hw).time_s
    for switch in SWITCHES:
        result = simulate("v3", p, hw, options={switch: False})
        assert result.time_s > base and result.options == {switch: False}


def test_simulate_refuses_an_option_the_algorithm_does_not_take():
    with pytest.raises(FlashsimError, match="v2 takes no option pingpong"):
        simulate("v2", Problem(1, 1, 128, 64), load_profile("h100"), options={"pingpong": False})


def test_cli_simulate_and_compare_take_the_switches(capsys, tmp_path):
    argv = ["simulate", "--algo", "v3", "-n", "1024", "-b", "1", "--json"]
    assert cli.main(argv) == 0
    on = json.loads(capsys.readouterr().out)
    assert cli.main([*argv, "--no-intra-overlap", "--no-pingpong"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert "options" not in on and off["options"] == {"pingpong": False, "intra_overlap": False}
    assert off["tflops"] < on["tflops"] and off["bytes"]["l2_read"] == on["bytes"]["l2_read"]
    assert cli.main(["compare", "-n", "1024", "-b", "1", "--no-warp-specialization", "--json", "--jobs", "1",
                     "--out", str(tmp_path)]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert {r["algo"] for r in results} == {"v3", "v3-fp8"}  # the algorithms that take the switch
    assert all(r["options"] == {"warp_specialization": False} for r in results)


@pytest.mark.parametrize("argv", [["simulate", "--algo", "v2", "--no-pingpong"],
                                  ["compare", "--algos", "v2", "v3", "--no-intra-overlap"],
                                  ["trace", "--algo", "standard", "--no-warp-specialization"]])
def test_cli_refuses_the_switches_for_other_algorithms(capsys, argv):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no --no-" in err and "only v3, v3-fp8 do" in err
