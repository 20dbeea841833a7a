"""The backward pass: standard-bwd, v2-bwd and v3-bwd compute attention's gradients (numeric interpreter
against fp64 autograd), their closed forms equal the op-by-op count, the timing model sends atomics to the L2,
and the commands take --pass and report per-pass FLOPs and HBM footprints."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from flashsim.algorithms import Problem
from flashsim.algorithms.api import attention_backward
from flashsim.algorithms.backward import backward_of, pass_algos
from flashsim.algorithms.closed_form import closed_form
from flashsim.algorithms.counting import count_io
from flashsim.algorithms.memory import tensor_bytes
from flashsim.algorithms.pass_memory import longest_seqlen, pass_tensors, total_bytes
from flashsim.algorithms.schedules import build
from flashsim.algorithms.tiling import default_tiling, resolve_tiling
from flashsim.cli import main
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.simulator.api import simulate
from flashsim.simulator.limits import check_memory
from flashsim.simulator.runner import simulate_pass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
H100 = load_profile("h100")


def autograd_reference(q, k, v, do, causal: bool, align: str):
    """dQ, dK, dV of fp64 attention by torch autograd; K/V heads repeated for GQA, so their gradients sum
    over the query heads of a group. Rows that see no key give O = 0 and no gradient."""
    q, k, v = (x.double().requires_grad_() for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
    nq, nk = q.shape[2], k.shape[2]
    if causal:
        shift = nk - nq if align == "bottom-right" else 0
        s = s.masked_fill(torch.arange(nk)[None, :] > torch.arange(nq)[:, None] + shift, -math.inf)
    p = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
    (p @ vv).backward(do.double())
    return q.grad, k.grad, v.grad


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest error relative to the largest gradient, floored at 1 (the inputs are unit normal): where the
    exact gradient cancels to ~0 (one key: dS = dP - D = 0), fp32 rounding is measured on the inputs' scale."""
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1.0)).item()


# -- numeric proof --------------------------------------------------------------------------------------


@FAST
@given(
    algo=st.sampled_from(("standard", "v2", "v3")),
    nq=st.integers(1, 160),
    nk=st.integers(1, 160),
    d=st.sampled_from((32, 64)),
    kv_heads=st.sampled_from((1, 2)),
    group=st.sampled_from((1, 2)),
    causal=st.booleans(),
    align=st.sampled_from(("bottom-right", "top-left")),
    seed=st.integers(0, 2**16),
)
def test_gradients_equal_fp64_autograd(algo, nq, nk, d, kv_heads, group, causal, align, seed):
    gen = torch.Generator().manual_seed(seed)
    heads = kv_heads * group
    q = torch.randn(1, heads, nq, d, generator=gen)
    k = torch.randn(1, kv_heads, nk, d, generator=gen)
    v = torch.randn(1, kv_heads, nk, d, generator=gen)
    do = torch.randn(1, heads, nq, d, generator=gen)
    got = attention_backward(q, k, v, do, algo=algo, causal=causal, causal_align=align)
    want = autograd_reference(q, k, v, do, causal, align)
    for name, g, w in zip(("dQ", "dK", "dV"), got, want, strict=True):
        assert g.shape == w.shape, name
        assert relative_error(g, w) < 1e-5, (name, relative_error(g, w))


@pytest.mark.parametrize("causal", [False, True])
def test_v2_bwd_separate_dq_pass_equals_autograd(causal):
    """dq='pass': no atomics, dQ accumulated over the key blocks by a second kernel per Q block."""
    gen = torch.Generator().manual_seed(3)
    q, do = torch.randn(1, 4, 150, 64, generator=gen), torch.randn(1, 4, 150, 64, generator=gen)
    k, v = torch.randn(1, 2, 200, 64, generator=gen), torch.randn(1, 2, 200, 64, generator=gen)
    got = attention_backward(q, k, v, do, algo="v2", causal=causal, dq="pass")
    for g, w in zip(got, autograd_reference(q, k, v, do, causal, "bottom-right"), strict=True):
        assert relative_error(g, w) < 1e-5


def test_bf16_gradients_stay_close():
    """bf16 operands (P and dS rounded for the GEMMs, as the kernels do) stay within a few percent."""
    gen = torch.Generator().manual_seed(1)
    q, k, v, do = (torch.randn(1, 2, 128, 64, generator=gen) for _ in range(4))
    got = attention_backward(*(x.bfloat16() for x in (q, k, v, do)), algo="v2", causal=True)
    for g, w in zip(got, autograd_reference(q, k, v, do, True, "bottom-right"), strict=True):
        assert relative_error(g.float(), w) < 3e-2


# -- counting: closed forms -----------------------------------------------------------------------------


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    algo=st.sampled_from(("standard-bwd", "v2-bwd", "v3-bwd")),
    nq=st.integers(1, 400),
    nk=st.integers(1, 400),
    d=st.sampled_from((64, 128, 192, 256)),
    group=st.sampled_from((1, 2)),
    causal=st.booleans(),
    align=st.sampled_from(("bottom-right", "top-left")),
    dq=st.sampled_from(("atomic", "pass")),
)
def test_closed_forms_equal_the_count(algo, nq, nk, d, group, causal, align, dq):
    p = Problem(2, 2 * group, nq, d, seqlen_k=nk, kv_heads=2, causal=causal, causal_align=align)
    t = resolve_tiling(algo, p, H100)
    counted = count_io(build(algo, p, t, dq=dq)).as_dict()
    assert closed_form(algo, p, t, dq=dq).as_dict() == counted


def test_dq_atomics_are_one_pass_of_dq_per_key_block():
    """FA2's backward adds the fp32 dQ of every (key block, Q block) once: Tc x (B H Nq d x 4) bytes, none
    of them read back by the blocks; with dq='pass' there are none."""
    p = Problem(1, 4, 512, 64)
    t = resolve_tiling("v2-bwd", p, H100)
    tc = -(-p.seqlen_k // t.block_n)
    io = count_io(build("v2-bwd", p, t))
    assert io.gmem_atomic == {"dQaccum": tc * 4 * 512 * 64 * 4}
    assert "dQaccum" not in count_io(build("v2-bwd", p, t, dq="pass")).gmem_atomic


def test_explain_v2_bwd_prints_the_nest(capsys):
    assert main(["explain", "--algo", "v2-bwd", "--seqlen", "256", "--batch", "1", "--heads", "2"]) == 0
    out = capsys.readouterr().out
    assert "dQaccum_i += dQ_i" in out and "totals agree with the op-by-op count" in out
    assert main(["explain", "--algo", "v3", "--pass", "bwd", "--seqlen", "256", "--batch", "1", "--heads", "2",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["algo"] == "v3-bwd"


# -- timing: atomics in the L2 ------------------------------------------------------------------------------


def test_atomics_go_to_the_l2_at_its_atomic_rate():
    p = Problem(1, 2, 512, 64)
    r = simulate("v2-bwd", p, H100, sms=None)
    t = resolve_tiling("v2-bwd", p, H100)
    counted = count_io(build("v2-bwd", p, t)).gmem_atomic
    assert r.bytes["l2_atomic"] == sum(counted.values())
    # a block ends once the L2 has performed its reductions: a slow atomic unit holds the SMs
    slow = replace(H100, l2_atomic_bytes_per_s=H100.l2_atomic_bytes_per_s / 256)
    held = simulate("v2-bwd", p, slow, sms=None)
    assert held.kernel_time_s > 1.5 * r.kernel_time_s and held.bound_by == "l2_atomic"
    assert held.kernel_time_s > sum(counted.values()) / slow.l2_atomic_bytes_per_s
    # the separate dQ pass issues no atomics: the atomic rate does not move it
    a = simulate("v2-bwd", p, H100, sms=None, options={"dq": "pass"})
    b = simulate("v2-bwd", p, slow, sms=None, options={"dq": "pass"})
    assert "l2_atomic" not in a.bytes and a.time_s == b.time_s


def test_backward_throughput_counts_two_and_a_half_forward_flops():
    p = Problem(1, 2, 512, 64, causal=True)
    assert p.flops("bwd") == 2.5 * p.flops() and p.flops("fwd+bwd") == 3.5 * p.flops()
    r = simulate_pass("v2", p, H100, "fwd+bwd", sms=None)
    times = r.sim["pass_time_s"]
    assert r.time_s == pytest.approx(times["fwd"] + times["bwd"])
    assert r.tflops == pytest.approx(3.5 * p.flops() / r.time_s / 1e12)
    bwd = simulate_pass("v2", p, H100, "bwd", sms=None)
    assert bwd.algo == "v2-bwd" and bwd.time_s == pytest.approx(times["bwd"])
    assert bwd.tflops == pytest.approx(2.5 * p.flops() / bwd.time_s / 1e12)


# -- passes and the commands ----------------------------------------------------------------------------


def test_pass_mapping():
    assert pass_algos("v2", "bwd") == ["v2-bwd"]
    assert pass_algos("standard", "fwd+bwd") == ["standard", "standard-bwd"]
    assert pass_algos("v3-bwd", "bwd") == ["v3-bwd"]
    assert set(backward_of()) == {"standard", "v2", "v3"}
    with pytest.raises(FlashsimError, match="no backward"):
        pass_algos("v1", "bwd")


def test_simulate_pass_cli(capsys):
    args = ["simulate", "--algo", "v2", "--seqlen", "256", "--batch", "1", "--heads", "2", "--json", "--full"]
    assert main([*args, "--pass", "fwd+bwd"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pass"] == "fwd+bwd" and set(out["sim"]["pass_time_s"]) == {"fwd", "bwd"}
    assert main(["simulate", "--algo", "v1", "--pass", "bwd"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no backward" in err
    assert main([*args, "--pass", "fwd+bwd", "--block-m", "64"]) == 2


# -- memory footprint -----------------------------------------------------------------------------------------


def test_memory_tensors_per_pass():
    p = Problem(2, 8, 1024, 128, kv_heads=2)
    q, kv, rows, s = 2 * 8 * 1024 * 128, 2 * 2 * 1024 * 128, 2 * 8 * 1024, 2 * 8 * 1024 * 1024
    assert total_bytes("v2", p, "fwd", H100) == 2 * (q + 2 * kv + q) + 4 * rows
    assert total_bytes("standard", p, "fwd", H100) == 2 * (q + 2 * kv + q + 2 * s)
    bwd = pass_tensors("v2", p, "bwd", H100)
    assert bwd["dQaccum"] == 4 * q and bwd["dKaccum"] == 4 * kv and bwd["D"] == 4 * rows
    assert bwd["dO"] == bwd["dQ"] == 2 * q and bwd["dK"] == bwd["dV"] == 2 * kv
    assert pass_tensors("standard", p, "bwd", H100)["dS"] == 2 * s
    assert "dQaccum" not in pass_tensors("standard", p, "bwd", H100)
    both = total_bytes("v2", p, "fwd+bwd", H100)
    assert both == sum({**pass_tensors("v2", p, "fwd", H100), **bwd}.values())
    # the record's tensors are what simulate's memory check counts
    assert pass_tensors("v2", p, "bwd", H100) == tensor_bytes("v2-bwd", p, default_tiling("v2-bwd", p, H100))


def test_simulate_refuses_a_backward_whose_tensors_do_not_fit():
    """At 1.5M tokens x 32 heads x d128 the forward's Q, K, V, O and LSE (~49 GB) fit an H100's 80 GB; the
    backward's gradients, dO and fp32 dQ accumulator (~123 GB in all) do not."""
    p = Problem(1, 32, 1_500_000, 128)
    check_memory("v2", p, default_tiling("v2", p, H100), H100)
    with pytest.raises(FlashsimError, match="v2-bwd .* needs .* of global memory .*dQaccum"):
        check_memory("v2-bwd", p, default_tiling("v2-bwd", p, H100), H100)


@pytest.mark.parametrize("algo, pass_", [("standard", "bwd"), ("v2", "fwd+bwd")])
def test_longest_sequence_is_the_last_that_fits(algo, pass_):
    p = Problem(1, 16, 1, 128)
    n = longest_seqlen(algo, p, pass_, H100)
    assert total_bytes(algo, replace(p, seqlen_q=n, seqlen_k=n), pass_, H100) <= H100.hbm_bytes
    assert total_bytes(algo, replace(p, seqlen_q=n + 1, seqlen_k=n + 1), pass_, H100) > H100.hbm_bytes


def test_memory_cli(capsys):
    assert main(["memory", "--hw", "h100", "--seqlen", "8192", "--headdim", "128", "--pass", "bwd", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["algo"] for r in out["algorithms"]] == ["standard", "v2", "v3"]
    assert out["skipped"][0]["algo"] == "v1"
    by = {r["algo"]: r for r in out["algorithms"]}
    assert by["standard"]["longest_seqlen"] < by["v2"]["longest_seqlen"]
    assert main(["memory", "--algos", "v1", "--pass", "bwd"]) == 2
    assert main(["memory", "--seqlen", "4096"]) == 0
    assert "longest seqlen that fits" in capsys.readouterr().out


def test_flash_backward_bytes_grow_as_n_squared_over_the_key_block():
    """v2-bwd re-reads Q, dO, LSE and D and adds dQ once per key block: for long sequences its global-memory
    bytes grow as N^2 and fall as 1 / Bc (N^2 d^2 / M with Bc ~ M / d, as the forward)."""
    from flashsim.algorithms.mapping import Tiling

    def gmem(n: int, block_n: int) -> int:
        p = Problem(1, 4, n, 64)
        return closed_form("v2-bwd", p, Tiling(64, block_n, 8, 2)).gmem_bytes

    assert gmem(16384, 128) / gmem(8192, 128) == pytest.approx(4, rel=0.03)  # less the N d terms
    assert gmem(16384, 64) / gmem(16384, 128) == pytest.approx(2, rel=0.02)
    # standard-bwd's P, dP and dS are N^2 whatever the tiles
    p = Problem(1, 4, 4096, 64)
    both = [closed_form("standard-bwd", p, Tiling(128, n, 4, 2)).gmem_read["dS"] for n in (64, 128)]
    assert both[0] == both[1]


def test_compare_pass_bwd_and_fwd_plus_bwd(capsys, tmp_path):
    base = ["compare", "--algos", "v1", "v2", "--seqlen", "256", "--batch", "1", "--heads", "2", "--json",
            "--jobs", "1", "--full", "--out", str(tmp_path)]
    assert main([*base, "--pass", "bwd"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["algo"] for r in out["results"]] == ["v2-bwd"]
    assert out["skipped"][0]["algo"] == "v1"
    assert main([*base, "--pass", "fwd+bwd"]) == 0
    (both,) = json.loads(capsys.readouterr().out)["results"]
    assert both["algo"] == "v2 fwd+bwd" and both["pass"] == "fwd+bwd"
    assert both["time_s"] == pytest.approx(sum(both["sim"]["pass_time_s"].values()))
