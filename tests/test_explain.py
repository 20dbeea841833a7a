"""`flashsim explain`: the loop nest, checked against the op-by-op count and against golden text."""

from __future__ import annotations

import json
import re

import pytest
from flashsim import cli
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.closed_form import Loop, Step, loop_nest
from flashsim.algorithms.counting import count_io
from flashsim.algorithms.explain import explain
from flashsim.algorithms.problem import HEADDIMS
from flashsim.algorithms.schedules import build
from flashsim.algorithms.schedules.v3_fp8 import build as build_fp8
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ALGOS = ("standard", "v1", "v2", "v3", "v3-fp8")
GOLDEN_ARGS = ["explain", "--algo", "v2", "--batch", "1", "--heads", "2", "--seqlen", "256", "--seqlen-kv", "320",
               "--headdim", "64", "--dtype", "fp16", "--block-m", "128", "--block-n", "64", "--warps", "4",
               "--stages", "2", "--causal"]
GOLDEN = """\
v2: B=1 H=2 N=256 Nk=320 d=64 fp16 causal; tiles 128x64, 4 warps, 2 stages

kernel 1/1 flash_fwd_v2: 4 thread blocks x 128 threads
                                               path           execs   gmem/it      gmem   smem/it      smem  work/it
  for (b, h) in 1 x 2 [grid]                                      2
    for i in 0..2  q-block [grid]                                 4
      load Q_i                                 gmem->smem         4    16 KiB    64 KiB    16 KiB    64 KiB
      for j in 0..5  kv-block (causal: to the diagonal)          16
        load K_j                               gmem->smem        16     8 KiB   128 KiB     8 KiB   128 KiB
        load V_j                               gmem->smem        16     8 KiB   128 KiB     8 KiB   128 KiB
        S = Q_i K_j^T  mma_sync, split rows    smem->rf          16         -         -    48 KiB   768 KiB  1.05M FLOP
        online softmax, O *= e^(m_old - m)     rf                16         -         -         -         -  8.32k exp
        O += P V_j                             smem->rf          16         -         -    32 KiB   512 KiB  1.05M FLOP
      O /= l, LSE = m + log l                  rf                 4         -         -         -         -  256 exp
      store O_i                                rf->gmem           4    16 KiB    64 KiB         -         -
      store LSE_i                              rf->gmem           4     512 B     2 KiB         -         -
  total: gmem 386 KiB (read K 128 KiB, Q 64 KiB, V 128 KiB; write LSE 2 KiB, O 64 KiB), smem 1.56 MiB
  critical path of thread block (0, 0, 1) (op graph): 31 of 53 ops, 10.5M tensor FLOPs, 40 KiB loaded/stored (10 Gemm,
    10 SyncThreads, 5 OnlineSoftmax, 2 Load, 2 Wait, 1 Normalize, 1 Store)

schedule total: gmem 386 KiB (395264 B), smem 1.56 MiB (1638400 B), 33.6M tensor FLOPs, 134k exps
Q_i and O_i cross global memory once; K and V once per q-block: Tr = 2 passes over K and V. Tiles of ~M / d rows give
Tr ~ N d / M, so the bytes are Theta(N^2 d^2 / M).
totals agree with the op-by-op count
"""


def tiling_for(algo: str):
    if algo in ("v3", "v3-fp8"):
        return st.builds(lambda bm, bn: Tiling(bm, bn, 4 * (bm // 64 + 1), 2), st.sampled_from([64, 128]),
                         st.sampled_from([32, 64, 80, 128]))
    blocks = st.sampled_from([16, 32, 64, 128])
    return st.builds(Tiling, blocks, blocks, st.sampled_from([1, 4]), st.just(2))


@st.composite
def problems(draw, algo: str):
    kv_heads = draw(st.integers(1, 2))
    nq = draw(st.integers(1, 500))
    return Problem(draw(st.integers(1, 2)), kv_heads * draw(st.sampled_from([1, 3])), nq,
                   draw(st.sampled_from(HEADDIMS)), seqlen_k=draw(st.one_of(st.just(nq), st.integers(1, 500))),
                   kv_heads=kv_heads, causal=draw(st.booleans()),
                   dtype="fp8" if algo == "v3-fp8" else draw(st.sampled_from(["fp16", "bf16", "fp32"])))


def steps(body):
    for node in body:
        if isinstance(node, Loop):
            yield from steps(node.body)
        else:
            yield node


def test_golden_text(capsys):
    assert cli.main(GOLDEN_ARGS) == 0
    assert capsys.readouterr().out == GOLDEN


@pytest.mark.parametrize("algo", ALGOS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_printed_totals_are_the_counted_ones(algo, data):
    p, t = data.draw(problems(algo)), data.draw(tiling_for(algo))
    schedule = build_fp8(p, t) if algo == "v3-fp8" else build(algo, p, t)
    counted = count_io(schedule)
    ex = explain(algo, p, t)
    assert ex.agrees and ex.totals.as_dict() == counted.as_dict()
    text = ex.text()
    assert re.search(rf"schedule total: gmem .* \({counted.gmem_bytes} B\), smem .* \({counted.smem_bytes} B\)", text)
    assert text.rstrip().endswith("totals agree with the op-by-op count")


@pytest.mark.parametrize("algo", ALGOS)
def test_per_iteration_bytes_times_executions_are_the_totals(algo):
    """With no ragged or masked tile every execution moves the per-iteration bytes, and every loop runs
    its trip count each time it is entered: the nest is a faithful loop nest, not just a sum."""
    p = Problem(2, 4, 512, 64, kv_heads=2, dtype="fp8" if algo == "v3-fp8" else "bf16")
    t = Tiling(128, 64, 12, 2) if algo.startswith("v3") else Tiling(64, 64, 4, 2)
    for nest in loop_nest(algo, p, t):
        for step in steps(nest.body):
            assert all(e.per_iter * step.execs == e.total for e in step.effects), step.text

        def check(body, entries):
            for node in body:
                if isinstance(node, Loop):
                    assert node.execs == node.trip * entries, node.var
                    check(node.body, node.execs)
                elif node.when:  # conditional steps run on some iterations only
                    assert isinstance(node, Step) and node.execs < entries, node.text
                else:
                    assert node.execs == entries, node.text

        check(nest.body, 1)


def test_json_is_one_object_with_the_counted_totals(capsys):
    assert cli.main([*GOLDEN_ARGS, "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    result = json.loads(out)
    assert result["agrees_with_count"] and result["totals"] == result["counted"]
    assert result["totals"]["gmem_bytes"] == 395264
    loop = result["kernels"][0]["nest"][0]["body"][0]
    assert loop["loop"].startswith("i in 0..2") and loop["grid"]


@pytest.mark.parametrize("argv", [
    ["explain", "--algo", "v9"],
    ["explain", "--algo", "v2", "--headdim", "100"],
    ["explain", "--algo", "v2", "--dtype", "fp8"],
    ["explain", "--algo", "v2", "--block-m", "1024", "--block-n", "1024"],
    ["explain", "--algo", "v3", "--seqlen", "-4"],
])
def test_bad_input_is_one_line_exit_2(capsys, argv):
    try:
        rc = cli.main(argv)
    except SystemExit as exc:  # argparse rejects an unknown choice itself, also with status 2
        rc = exc.code
    assert rc == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err
