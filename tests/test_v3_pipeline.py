"""V3's consumer order (Tiling.pipeline): FA3's overlapped loop and cuDNN's serial one compute the same
attention from the same bytes; the serial one waits for each GEMM before its next op, holds the ping-pong turn
through the softmax and passes it before P V, and its producer loads K_j then V_j (cuDNN's SASS); only v3 and
v3-fp8 take it, and time is what it changes."""

from __future__ import annotations

import pytest
import torch
from flashsim import cli
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.counting import count_io
from flashsim.algorithms.ir import Arrive, Gemm, GemmWait, OnlineSoftmax, Rescale, RowMax, Wait
from flashsim.algorithms.numeric import run_numeric
from flashsim.algorithms.schedules import build
from flashsim.errors import FlashsimError
from flashsim.hw_profiles.loader import load_profile
from flashsim.simulator.api import simulate

# 2 consumer warpgroups, a ragged last Q block (150 rows) and GQA: the ablation tests' problem
from .test_v3_ablation import _inputs, _problem, _reference


@pytest.mark.parametrize("algo, dtype, causal, splits, stages", [
    ("v3", "fp32", False, 1, 2), ("v3", "fp32", True, 1, 3), ("v3", "fp32", False, 2, 2),
    ("v3-fp8", "fp8", False, 1, 2), ("v3-fp8", "fp8", True, 1, 3), ("v3-fp8", "fp8", False, 2, 2)])
def test_serial_computes_attention_from_the_same_bytes(algo, dtype, causal, splits, stages):
    p, x = _problem(causal, dtype), _inputs()
    serial = build(algo, p, Tiling(128, 32, 12, stages, splits=splits, pipeline="serial"))
    overlap = build(algo, p, Tiling(128, 32, 12, stages, splits=splits))
    out = run_numeric(serial, x)["O"]
    if dtype == "fp32":
        assert (out.double() - _reference(x, causal)).abs().max() < 1e-5
    # the accumulator sees the same products and rescales in the same order
    assert torch.equal(out, run_numeric(overlap, x)["O"])
    assert count_io(serial).gmem_bytes == count_io(overlap).gmem_bytes


def _consumer(tiling: Tiling, c: int = 0) -> list:
    kernel = build("v3", _problem(False), tiling).kernels[0]
    return list(next(r for r in kernel.roles if r.name == f"consumer{c}").program((0, 0, 0)))


def test_serial_waits_for_each_gemm_and_holds_the_turn_through_the_softmax():
    ops = _consumer(Tiling(128, 32, 12, 2, pipeline="serial"))
    gemms = [i for i, op in enumerate(ops) if isinstance(op, Gemm)]
    assert [ops[i].dst for i in gemms] == ["S", "acc"] * 6  # S_j, then P_j V_j, for each of the 6 K/V blocks
    for i in gemms:  # each GEMM is waited for before the consumer does anything else with its registers
        after = next(op for op in ops[i + 1:] if not isinstance(op, (Arrive, Wait)))
        assert isinstance(after, GemmWait) and after.token == ("s" if ops[i].dst == "S" else "o")
    # the softmax and O's rescale (from the second K/V block on: before it O holds nothing) come between S_j's
    # wait and P_j V_j
    assert Rescale not in [type(op) for op in ops[gemms[0]:gemms[1]]]
    between = [type(op) for op in ops[gemms[2]:gemms[3]]]
    assert OnlineSoftmax in between and Rescale in between
    # cuDNN's SASS (experiments/results/h200/session52/): the turn is taken once V_j has landed, right before the
    # softmax, and passed right before P_j V_j: 6 of each
    softmaxes = [i for i, op in enumerate(ops) if isinstance(op, OnlineSoftmax)]
    turn_waits = [i for i, op in enumerate(ops) if isinstance(op, Wait) and op.barrier.startswith("turn")]
    passes = [i for i, op in enumerate(ops) if isinstance(op, Arrive) and op.barrier.startswith("turn")]
    assert [i + 1 for i in turn_waits] == softmaxes and [i + 1 for i in passes] == gemms[1::2]
    assert all(isinstance(ops[i - 1], Wait) and ops[i - 1].barrier.startswith("fullV") for i in turn_waits)
    # the row max is taken before V_j's wait and the turn, into the register the softmax then reads
    assert all(isinstance(ops[i - 2], RowMax) and ops[i - 2].out == ops[i + 1].max_in for i in turn_waits)
    assert sum(isinstance(op, RowMax) for op in ops) == 6
    # FA3's loop issues S_j+1 before P_j V_j is waited for
    fa3 = _consumer(Tiling(128, 32, 12, 2))
    g = [i for i, op in enumerate(fa3) if isinstance(op, Gemm)]
    assert [fa3[i].dst for i in g[1:3]] == ["S", "acc"]
    assert not any(isinstance(op, GemmWait) for op in fa3[g[1]:g[2]])


def test_tiling_field_round_trip_and_refusals():
    t = Tiling(128, 128, 12, 2, pipeline="serial")
    assert t.as_dict()["pipeline"] == "serial" and "pipeline" not in Tiling(128, 128, 12, 2).as_dict()
    assert Tiling(**t.as_dict()) == t and "waited at once" in t.describe()
    with pytest.raises(FlashsimError, match="pipeline must be one of overlap, serial"):
        Tiling(128, 128, 12, 2, pipeline="eager")


def test_serial_costs_time_on_the_h200_and_persistent_blocks_run_on():
    # one elementwise model for both loops (the profile's default times cuDNN's code, the serial loop's, apart)
    hw = load_profile("h200").with_overrides(["issue_model=1"])
    for p in (Problem(2, 8, 2048, 64), Problem(2, 8, 3000, 128, causal=True)):
        overlap = simulate("v3", p, hw, Tiling(128, 128, 12, 2))
        serial = simulate("v3", p, hw, Tiling(128, 128, 12, 2, pipeline="serial"))
        assert serial.cycles > overlap.cycles  # nothing of a consumer's own runs under its GEMMs
        assert serial.bytes["hbm_read"] == pytest.approx(overlap.bytes["hbm_read"], rel=0.02)


def test_cli_takes_pipeline_for_v3_only(capsys):
    assert cli.main(["simulate", "--algo", "v3", "-n", "1024", "-b", "1", "--pipeline", "serial", "--json"]) == 0
    assert '"pipeline": "serial"' in capsys.readouterr().out
    assert cli.main(["simulate", "--algo", "v2", "-n", "1024", "-b", "1", "--pipeline", "serial"]) == 2
    assert "--pipeline applies to v3 and v3-fp8" in capsys.readouterr().err
    argv = ["simulate", "--algo", "v3", "-n", "1024", "-b", "1", "--pipeline", "serial", "--no-warp-specialization"]
    assert cli.main(argv) == 2
    assert "takes no --no-warp-specialization" in capsys.readouterr().err


def _producer(tiling: Tiling) -> list:
    kernel = build("v3", _problem(False), tiling).kernels[0]
    return list(next(r for r in kernel.roles if r.name == "producer").program((0, 0, 0)))


def test_serial_producer_loads_k_then_v_of_each_block():
    from flashsim.algorithms.ir import Load

    def order(tiling):
        return [op.src.tensor + str(op.src.row // 32) for op in _producer(tiling)
                if isinstance(op, Load) and op.src.tensor in ("K", "V")]

    # cuDNN's: K_j, V_j, K_j+1, ...; FA3's: K_0, then K_j+1 before V_j
    assert order(Tiling(128, 32, 12, 2, pipeline="serial"))[:6] == ["K0", "V0", "K1", "V1", "K2", "V2"]
    assert order(Tiling(128, 32, 12, 2))[:6] == ["K0", "K1", "V0", "K2", "V1", "K3"]


def test_serial_runs_on_one_k_and_one_v_buffer():
    p, x = _problem(True, "fp32"), _inputs()
    one = build("v3", p, Tiling(128, 32, 12, 1, pipeline="serial"))
    assert (run_numeric(one, x)["O"].double() - _reference(x, True)).abs().max() < 1e-5
    hw = load_profile("h200")
    q = Problem(1, 8, 1024, 256)
    with pytest.raises(FlashsimError, match="at least 2 K/V stages"):  # FA3's S_j+1 overlaps P_j V_j
        simulate("v3", q, hw, Tiling(128, 128, 12, 1))
    assert simulate("v3", q, hw, Tiling(128, 128, 12, 1, pipeline="serial")).cycles > 0
