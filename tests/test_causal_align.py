"""One causal convention, two alignments: bottom-right (the default, FlashAttention >= 2.1) and top-left
(PyTorch SDPA's is_causal), honoured by the schedules, the Mask, the numeric and counting interpreters, the
closed forms and the command line."""

from __future__ import annotations

import json
import math

import pytest
import torch
from flashsim import cli
from flashsim.algorithms import Problem, Tiling, attention, catalog
from flashsim.algorithms.closed_form import closed_form
from flashsim.algorithms.counting import count_io
from flashsim.algorithms.ir import Mask
from flashsim.algorithms.numeric import run_numeric
from flashsim.algorithms.schedules import build
from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile
from flashsim.simulator.api import simulate

ALIGNS = ("bottom-right", "top-left")
LENGTHS = [(37, 101), (101, 37), (65, 64), (1, 77), (77, 1)]  # Nq < Nk and Nq > Nk, odd lengths
TILINGS = {"standard": Tiling(32, 32, 2, 2), "v1": Tiling(16, 32, 2, 1), "v2": Tiling(32, 16, 2, 2),
           "v3": Tiling(64, 32, 8, 2), "v3-fp8": Tiling(64, 32, 8, 2)}


def hidden(nq: int, nk: int, align: str) -> torch.Tensor:
    """The explicit mask: row r sees keys 0..r + (nk - nq) bottom-right, 0..r top-left."""
    shift = nk - nq if align == "bottom-right" else 0
    return torch.arange(nk)[None, :] > torch.arange(nq)[:, None] + shift


def reference(q, k, v, align: str) -> torch.Tensor:
    """fp64 attention with the explicit mask; a row that sees no key gives 0."""
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(hidden(q.shape[2], k.shape[2], align), -math.inf)
    return torch.nan_to_num(torch.softmax(s, -1), nan=0.0) @ v.double()


def inputs(nq: int, nk: int, d: int = 32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 2, nq, d, generator=g), torch.randn(1, 1, nk, d, generator=g), \
        torch.randn(1, 1, nk, d, generator=g)


@pytest.mark.parametrize("algo", tuple(TILINGS))
@pytest.mark.parametrize("align", ALIGNS)
@pytest.mark.parametrize("nq, nk", LENGTHS)
def test_numeric_matches_an_explicit_mask(algo, align, nq, nk):
    q, k, v = inputs(nq, nk)
    fp8 = catalog.get(algo).default_dtype == "fp8"
    dt = torch.bfloat16 if fp8 else torch.float32
    out = attention(q.to(dt), k.to(dt), v.to(dt), algo=algo, causal=True, tiling=TILINGS[algo],
                    causal_align=align).double()
    ref = reference(q, k, v, align)
    assert not torch.isnan(out).any()
    blind = hidden(nq, nk, align).all(1)  # rows that see no key: output 0, as FlashAttention
    assert torch.equal(out[:, :, blind], torch.zeros_like(out[:, :, blind]))
    tol = 0.1 if fp8 else 1e-5
    assert ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item() < tol


@pytest.mark.parametrize("align", ALIGNS)
@pytest.mark.parametrize("nq, nk", [(37, 101), (101, 37)])
def test_logsumexp_of_blind_rows_is_infinite(align, nq, nk):
    """LSE of a row that sees nothing is +inf (FlashAttention's non-split kernels), so a backward pass's
    exp(S - LSE) is 0 there."""
    q, k, v = inputs(nq, nk)
    p = Problem(1, 2, nq, 32, seqlen_k=nk, kv_heads=1, causal=True, dtype="fp32", causal_align=align)
    lse = run_numeric(build("v2", p, TILINGS["v2"]), {"Q": q, "K": k, "V": v})["LSE"][0, :, :nq, 0]
    blind = hidden(nq, nk, align).all(1)
    assert torch.all(lse[:, blind] == math.inf) and torch.isfinite(lse[:, ~blind]).all()


@pytest.mark.parametrize("algo", tuple(TILINGS))
@pytest.mark.parametrize("align", ALIGNS)
@pytest.mark.parametrize("nq, nk", [(37, 101), (101, 37), (200, 333)])
def test_counts_and_closed_forms_agree(algo, align, nq, nk):
    rec = catalog.get(algo)
    p = Problem(2, 2, nq, 64, seqlen_k=nk, causal=True, dtype=rec.default_dtype, causal_align=align)
    t = TILINGS[algo]
    assert closed_form(algo, p, t).as_dict() == count_io(build(algo, p, t)).as_dict()


def test_the_alignment_decides_which_blocks_are_visited():
    """Nq < Nk: top-left rows see fewer keys, so the flash schedules skip more K/V blocks; Nq > Nk: the
    bottom-right rows above the diagonal see nothing and are skipped."""
    for nq, nk in ((128, 512), (512, 128)):
        flops = {a: sum(count_io(build("v2", Problem(1, 1, nq, 64, seqlen_k=nk, causal=True, causal_align=a),
                                        Tiling(64, 64, 4, 2))).flops.values()) for a in ALIGNS}
        visible = {a: int((~hidden(nq, nk, a)).sum()) for a in ALIGNS}
        assert (flops["top-left"] < flops["bottom-right"]) == (visible["top-left"] < visible["bottom-right"])
        assert flops["top-left"] != flops["bottom-right"]


def test_mask_needed_follows_the_alignment():
    """The 64 x 64 tile at (0, 0) with Nq = 64, Nk = 128: bottom-right, row 0 sees keys 0..64 (no mask);
    top-left, row 0 sees key 0 only."""
    assert not Mask(0, 0, 64, 128, True, "bottom-right").needed(64, 64)
    assert Mask(0, 0, 64, 128, True, "top-left").needed(64, 64)


def test_problem_refuses_an_unknown_alignment():
    with pytest.raises(FlashsimError, match="unknown causal_align 'left'; choose one of bottom-right, top-left"):
        Problem(1, 1, 64, 64, causal=True, causal_align="left")
    assert Problem(1, 1, 64, 64).causal_align == "bottom-right"


def test_command_line_takes_the_alignment(capsys):
    def explain(*extra):
        assert cli.main(["explain", "--algo", "v2", "--batch", "1", "--heads", "1", "--seqlen", "100",
                         "--seqlen-kv", "300", "--headdim", "64", "--causal", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    bottom, top = explain(), explain("--causal-align", "top-left")
    assert bottom["problem"]["causal_align"] == "bottom-right" and top["problem"]["causal_align"] == "top-left"
    assert top["agrees_with_count"] and bottom["agrees_with_count"]
    assert top["totals"]["gmem_bytes"] < bottom["totals"]["gmem_bytes"]  # top-left reads fewer K/V blocks
    with pytest.raises(SystemExit) as info:  # argparse's own refusal of a choice: one line, status 2
        cli.main(["simulate", "--causal", "--causal-align", "sideways"])
    assert info.value.code == 2 and "invalid choice: 'sideways'" in capsys.readouterr().err


def test_simulator_runs_either_alignment():
    h100 = load_profile("h100")
    times = {a: simulate("v3", Problem(1, 4, 512, 128, seqlen_k=2048, causal=True, causal_align=a), h100).time_s
             for a in ALIGNS}
    assert times["top-left"] < times["bottom-right"]  # top-left rows see at most 512 of the 2048 keys
