"""FA2's two instantiations and its masking steps (algorithms/schedules/forward_code.py): the odd-length
kernel's lines and prologue, the masking steps FA2's source counts, and what each masking step issues beyond
the lowering, all from the committed Nsight Compute pages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.ir import MASK_OPS_PER_ELEMENT, Code, OnlineSoftmax
from flashsim.algorithms.numeric import run_numeric
from flashsim.algorithms.schedules import build
from flashsim.algorithms.schedules import forward_code as fc
from flashsim.experiments import code_lines, ncu_regions

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results"
S50 = RESULTS / "h100" / "session50" / "fa2-odd"
S51 = RESULTS / "h100" / "session51" / "fa2-masking"
SASS = {  # (head dim, N, causal) -> the SASS source page of SDPA flash's kernel at that shape
    (64, 3000, True): S50 / "ncu-sdpa-flash-d64-n3000-c1-sass.txt.gz",
    (64, 3072, True): S50 / "ncu-sdpa-flash-d64-n3072-c1-sass.txt.gz",
    (128, 3000, True): S50 / "ncu-sdpa-flash-d128-n3000-c1-sass.txt.gz",
    (128, 3072, True): S50 / "ncu-sdpa-flash-d128-n3072-c1-sass.txt.gz",
    (64, 3000, False): S51 / "ncu-sdpa-flash-d64-n3000-c0-sass.txt.gz",
    (128, 3000, False): S51 / "ncu-sdpa-flash-d128-n3000-c0-sass.txt.gz",
    (96, 3000, True): S51 / "ncu-sdpa-flash-d96-n3000-c1-sass.txt.gz",
    (96, 3072, True): S51 / "ncu-sdpa-flash-d96-n3072-c1-sass.txt.gz",
    (96, 3000, False): S51 / "ncu-sdpa-flash-d96-n3000-c0-sass.txt.gz",
    (256, 3000, True): S51 / "ncu-sdpa-flash-d256-n3000-c1-sass.txt.gz",
    (256, 3072, True): S51 / "ncu-sdpa-flash-d256-n3072-c1-sass.txt.gz",
    (256, 3000, False): S51 / "ncu-sdpa-flash-d256-n3000-c0-sass.txt.gz",
    (64, 4096, False): RESULTS / "h200" / "fa2-sass" / "ncu-sdpa-flash-d64-n4096-c0-sass.txt.gz",
    (128, 4096, False): RESULTS / "h200" / "fa2-sass" / "ncu-sdpa-flash-d128-n4096-c0-sass.txt.gz",
    (96, 4096, False): RESULTS / "h200" / "session20" / "fa2-d96" / "ncu-sdpa-flash-d96-n4096-c0-sass.txt.gz",
    (96, 4096, True): RESULTS / "h200" / "session50" / "ncu-sdpa-flash-d96-n4096-c1-sass.txt.gz",
}
TILES = {64: (128, 128), 96: (128, 64), 128: (128, 64), 256: (64, 64)}


def _lines(sass: Path) -> tuple[int, int, int]:
    return tuple(code_lines.stretches(str(sass)).values())


def _tiles_key(d: int, causal: bool) -> tuple:
    return ("fa2", d, *TILES[d], 4, causal)


def _steps(d: int, n: int, causal: bool) -> list[dict]:
    bm, bn = TILES[d]
    products = (bm // 4 // 16) * (bn // 8) * (d // 16) + (bm // 4 // 16) * (d // 8) * (bn // 16)
    return ncu_regions.steps(str(SASS[d, n, causal]), products)


def _lowered_mask(d: int) -> float:
    bm, bn = TILES[d]
    return MASK_OPS_PER_ELEMENT * bm * bn / (4 * 32)


@pytest.mark.parametrize("key", sorted(fc.ODD_LINES))
def test_the_odd_kernels_lines_are_its_sass(key):
    _, d, _, _, _, causal = key
    assert fc.ODD_LINES[key] == _lines(SASS[d, 3000, causal])


@pytest.mark.parametrize("key", [_tiles_key(96, False), _tiles_key(96, True), _tiles_key(256, True)])
def test_the_even_kernels_lines_added_are_their_sass(key):
    _, d, _, _, _, causal = key
    assert fc.LINES[key] == _lines(SASS[d, 4096 if d == 96 else 3072, causal])


def test_fa2_compiles_one_d256_kernel():
    # over d128 FA2 has only the odd instantiation: the same code at N 3000 and N 3072
    assert _lines(SASS[256, 3000, True]) == _lines(SASS[256, 3072, True])
    assert fc.LINES[_tiles_key(256, False)] == _lines(SASS[256, 3000, False])
    assert not fc.fa2_even(Problem(1, 1, 3072, 256, causal=True), 64, 64)


@pytest.mark.parametrize("d", [64, 96, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_the_odd_prologue_is_what_its_first_step_adds(d, causal):
    odd = _steps(d, 3000, causal)[0]["instructions"]
    even = _steps(d, 3072 if causal else 4096, causal)[0]["instructions"]
    # the non-causal odd kernel masks its first step (the bound check), which the lowering counts already
    added = odd - even - (0 if causal else _lowered_mask(d))
    assert fc.ODD_PROLOGUE_ISSUE[_tiles_key(d, causal)] == pytest.approx(added)


@pytest.mark.parametrize("d, n", [(64, 3000), (96, 3000), (96, 3072), (128, 3000), (128, 3072), (256, 3000)])
def test_a_masking_step_issues_what_the_table_adds_to_its_lowering(d, n):
    *masking, loop = _steps(d, n, True)[1:]
    bm, bn = TILES[d]
    assert len(masking) == fc.MASKING_STEPS["fa2"](bm, bn, d <= 128 and n % bm == 0) - 1
    added = np.mean([s["instructions"] for s in masking]) - loop["instructions"] - _lowered_mask(d)
    key = ("fa2", d, bm, bn, 4, d <= 128 and n % bm == 0)
    if added <= 0:  # d96: fewer than the lowering counts; the table takes nothing off
        assert key not in fc.MASKING_ISSUE and added > -0.05 * loop["instructions"]
    else:
        assert fc.MASKING_ISSUE[key] == pytest.approx(added)


def test_which_instantiation_fa2_launches():
    assert fc.fa2_even(Problem(2, 4, 3072, 128), 128, 64)
    assert not fc.fa2_even(Problem(2, 4, 3000, 128), 128, 64)
    assert not fc.fa2_even(Problem(2, 4, 1024, 128, seqlen_k=1000), 128, 64)
    assert not fc.fa2_even(Problem(2, 4, 1024, 128, seqlens=(1024, 512)), 128, 64)
    assert fc.fa2_even(Problem(2, 4, 1024, 64, seqlen_k=2048), 128, 128)


def _block(problem: Problem, tiling: Tiling, last: bool = True):
    kernel = build("v2", problem, tiling, code=True, bookkeeping=True).kernels[0]
    cta = max(kernel.ctas, key=lambda c: c[2]) if last else min(kernel.ctas, key=lambda c: c[2])
    return list(kernel.roles[0].program(cta))


FA2_D128 = Tiling(128, 64, 4, exp2="exp2f")


@pytest.mark.parametrize("n, masked", [(3072, 2), (3000, 3)])
def test_a_causal_block_masks_its_last_steps_as_fa2_counts(n, masked):
    ops = _block(Problem(1, 1, n, 128, causal=True), FA2_D128)
    softmax = [op for op in ops if isinstance(op, OnlineSoftmax)]
    assert [op.mask is not None for op in softmax] == [False] * (len(softmax) - masked) + [True] * masked
    stretches = [op for op in ops if isinstance(op, Code) and op.name.endswith(" masking")]
    assert len(stretches) == masked - 1
    assert stretches[0].issue == fc.MASKING_ISSUE["fa2", 128, 128, 64, 4, n % 128 == 0] and not stretches[0].nbytes
    names = {op.name.rsplit(" ", 1)[0] for op in ops if isinstance(op, Code)}
    assert names == {f"fa2 d128 128x64w4 causal{'' if n % 128 == 0 else ' odd'}"}
    # a block shorter than FA2's masking steps masks every step it has
    first = [op for op in _block(Problem(1, 1, n, 128, causal=True), FA2_D128, last=False)
             if isinstance(op, OnlineSoftmax)]
    assert len(first) == 2 and all(op.mask is not None for op in first)


def test_the_odd_kernel_fetches_and_issues_its_own_prologue():
    even = _block(Problem(1, 1, 3072, 64), Tiling(128, 128, 4, exp2="exp2f"))[0]
    odd = _block(Problem(1, 1, 3000, 64), Tiling(128, 128, 4, exp2="exp2f"))[0]
    assert even.nbytes == fc.LINES["fa2", 64, 128, 128, 4, False][0] * fc.LINE_BYTES
    assert odd.nbytes == fc.ODD_LINES["fa2", 64, 128, 128, 4, False][0] * fc.LINE_BYTES
    assert odd.issue - even.issue == fc.ODD_PROLOGUE_ISSUE["fa2", 64, 128, 128, 4, False]
    # our own kernel is one binary for every length, and its masks are the geometry's: the last block's 56 rows
    # cross one 64-key tile, where FA2's odd kernel runs three masking steps
    ours = _block(Problem(1, 1, 3000, 128, causal=True), Tiling(128, 64, 4))
    assert sum(op.mask is not None for op in ours if isinstance(op, OnlineSoftmax)) == 1
    assert not any(op.name.endswith((" odd prologue", " masking")) for op in ours if isinstance(op, Code))


def test_a_masking_step_that_needs_no_mask_changes_no_number():
    # N 200 at FA2's d128 tiles: the odd kernel masks 3 steps of the last block, one of which needs no mask
    p = Problem(1, 2, 200, 128, causal=True, dtype="fp32")
    ops = _block(p, FA2_D128)
    softmax = [op for op in ops if isinstance(op, OnlineSoftmax)]
    assert len(softmax) == 4 and [op.mask is not None for op in softmax] == [False, True, True, True]
    assert not softmax[1].mask.needed(128, 64)  # the geometry needs no mask there
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 200, 128, generator=gen) for _ in range(3))
    out = run_numeric(build("v2", p, FA2_D128), {"Q": q, "K": k, "V": v})["O"]
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.float(), ref, rtol=1e-4, atol=1e-4)
