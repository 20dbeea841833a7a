"""The committed Nsight Compute source pages of cuDNN's and our v3's forward kernels (run 119) read as
experiments/wgmma_loop.py reads them: cuDNN waits for each GEMM at once (Tiling pipeline "serial"), ours
waits for S alone while P V runs on (FA3's "overlap"); both issue about eight instructions per score."""

from __future__ import annotations

from pathlib import Path

import pytest
from flashsim.experiments import wgmma_loop

RUN = Path(__file__).resolve().parents[1] / "experiments" / "results" / "h200" / "session21" / "cudnn-sass"


def _loop(name: str) -> list[str]:
    source = wgmma_loop.read_source(RUN / f"ncu-{name}-sass.txt.gz")
    most = max(e for s, e, _ in source if wgmma_loop.opcode(s) == "HGMMA")
    return [s for s, _, _ in wgmma_loop.loop_order(source, most // 2)]


def _waits_after_commits(loop: list[str]) -> list[str]:
    """For each GEMM commit, the first GEMM wait that follows it ('0x0' or '0x1')."""
    out = []
    for i, s in enumerate(loop):
        if s.startswith("HGMMA"):
            out.append(next(t.split(",")[-1].strip() for t in loop[i + 1:] if "DEPBAR" in t))
    return out


@pytest.mark.parametrize("shape", ["d64-n4096-c0", "d64-n4096-c1", "d128-n4096-c0", "d128-n4096-c1"])
def test_cudnn_waits_for_each_gemm_at_once(shape):
    loop = _loop(f"sdpa-cudnn-{shape}")
    assert _waits_after_commits(loop) == ["0x0", "0x0"]  # S, then P V, each waited for in full
    turn = [i for i, s in enumerate(loop) if "BAR.SYNC" in s]
    pv = [i for i, s in enumerate(loop) if s.startswith("HGMMA")][1]
    assert turn and max(turn) < pv  # the ping-pong turn is taken before P V only


@pytest.mark.parametrize("d", [64, 128])
def test_our_v3_lets_pv_run_under_the_softmax(d):
    loop = _loop(f"v3-d{d}-n4096-c0")
    assert "0x1" in _waits_after_commits(loop)  # S_j waited for while P_j-1 V_j-1 runs on


def test_instructions_per_score():
    def total(name: str, d: int, causal: bool) -> float:
        source = wgmma_loop.read_source(RUN / f"ncu-{name}-sass.txt.gz")
        return sum(wgmma_loop.mix(source, wgmma_loop.scores(d, 4096, causal, None, None)).values())

    assert total("sdpa-cudnn-d64-n4096-c0", 64, False) == pytest.approx(8.28, abs=0.01)
    assert total("v3-d64-n4096-c0", 64, False) == pytest.approx(8.41, abs=0.01)
    assert total("sdpa-cudnn-d128-n4096-c0", 128, False) == pytest.approx(9.31, abs=0.01)


def test_bad_file_name_is_refused(tmp_path, capsys):
    assert wgmma_loop.main([str(tmp_path / "missing.txt")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize("key, name", [
    (("overlap", 64, 192, 128, 16), "v3-d64"), (("overlap", 128, 128, 176, 12), "v3-d128"),
    (("serial", 64, 128, 128, 12), "sdpa-cudnn-d64"), (("serial", 128, 128, 128, 12), "sdpa-cudnn-d128")])
def test_the_lowering_and_the_unlowered_count_make_the_consumer_loop(key, name):
    """One K/V step of the schedule's consumer (between two of its loop stretches): the lowered tile ops plus
    forward_code.WGMMA_UNLOWERED come to what Nsight Compute saw each consumer warp issue per K/V block."""
    from flashsim.algorithms import Problem, Tiling
    from flashsim.algorithms.ir import Code, Gemm, OnlineSoftmax, Rescale, RowMax
    from flashsim.algorithms.schedules import build
    from flashsim.algorithms.schedules.forward_code import WGMMA_UNLOWERED
    from flashsim.simulator.instructions import lower, lower_gemm, total

    pipeline, d, bm, bn, warps = key
    kernel = build("v3", Problem(1, 1, 4096, d), Tiling(bm, bn, warps, 2, pipeline=pipeline),
                   bookkeeping=True).kernels[0]
    program = list(next(r for r in kernel.roles if r.name == "consumer0").program(kernel.ctas[0]))
    stretches = [i for i, op in enumerate(program) if isinstance(op, Code)]
    assert len(stretches) == -(-4096 // bn)  # one per K/V block
    step = program[stretches[2]:stretches[3]]
    lowered = sum(total(lower_gemm(op)) for op in step if isinstance(op, Gemm))
    lowered += sum(total(lower(op)) for op in step if isinstance(op, (RowMax, OnlineSoftmax, Rescale)))
    issued = sum(wgmma_loop.loop_pass(wgmma_loop.read_source(RUN / f"ncu-{name}-n4096-c0-sass.txt.gz")).values())
    assert lowered + WGMMA_UNLOWERED[key] == pytest.approx(issued, abs=0.5)
    assert WGMMA_UNLOWERED[key] > 0.2 * issued  # a fifth or more of what the loop issues


def test_only_the_issue_model_asks_for_the_stretches():
    from flashsim.algorithms import Problem, Tiling
    from flashsim.algorithms.ir import Code
    from flashsim.algorithms.schedules import build

    p, t = Problem(1, 1, 1024, 64), Tiling(192, 128, 16, 2)

    def codes(schedule):
        kernel = schedule.kernels[0]
        return sum(isinstance(op, Code) for r in kernel.roles for op in r.program(kernel.ctas[0]))

    with_code = codes(build("v3", p, t, bookkeeping=True))
    assert codes(build("v3", p, t)) == 0 and with_code > 0 and with_code % 8 == 0  # one per consumer and K/V block
    assert codes(build("v3", p, Tiling(128, 64, 12, 2), bookkeeping=True)) == 0  # a kernel not measured


def _phases(path: Path) -> list[tuple[int, dict, int]]:
    return wgmma_loop.loop_phases(wgmma_loop.read_source(path))


@pytest.mark.parametrize("shape", ["d64-n4096-c0", "d128-n4096-c0"])
def test_cudnn_row_max_comes_before_the_turn_and_the_exponentials_under_it(shape):
    phases = _phases(RUN / f"ncu-sdpa-cudnn-{shape}-sass.txt.gz")
    row_max = next(i for i, (_, ops, _) in enumerate(phases) if ops.get("FMNMX", 0) >= 60)
    exps = next(i for i, (_, ops, _) in enumerate(phases) if ops.get("MUFU", 0) >= 60)
    assert row_max < exps
    assert phases[exps][1].get("BAR", 0) >= 1  # the phase opens with the turn's barrier
    assert all(ops.get("HGMMA", 0) == 0 for _, ops, _ in phases[row_max:exps + 1])  # no GEMM in between


def test_phase_cycles_come_from_the_kernels_elapsed_cycles():
    path = RUN / "ncu-sdpa-cudnn-d128-n4096-c0-sass.txt.gz"
    info = wgmma_loop.kernel_details(path)
    assert info["Elapsed Cycles"] == 1_399_818 and info["Grid Size"] == 132 and info["Block Size"] == 384
    text = "\n".join(wgmma_loop.phases_report(path, wgmma_loop.read_source(path)))
    assert "2,819 cycles per K/V block" in text  # 1,399,818 cycles over 496.5 blocks per consumer warp
    shares = [p[2] for p in _phases(path)]
    assert sum(shares) > 0


def test_phases_without_details_give_no_cycles(tmp_path):
    src = RUN / "ncu-sdpa-cudnn-d64-n4096-c0-sass.txt.gz"
    copy = tmp_path / src.name
    copy.write_bytes(src.read_bytes())
    text = "\n".join(wgmma_loop.phases_report(copy, wgmma_loop.read_source(copy)))
    assert "cycles per K/V block if" not in text and "| 0 |" in text
