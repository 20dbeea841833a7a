"""The mask of our v2's K/V loop, from the static SASS and from Nsight Compute's executed lines
(experiments/code_lines.py --mask-sass, --mask; experiments/results/h200/session39/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flashsim.experiments import code_lines

RESULTS = Path(__file__).resolve().parent.parent / "experiments" / "results" / "h200"


def test_every_v2_tile_has_one_dense_mask_region():
    masks = code_lines.sass_masks(json.loads((RESULTS / "session39/v2-sass-counts.json").read_text()))
    assert masks[("flashsim", 64, 128, 128, 4)] == (54, 443)
    assert masks[("flashsim", 128, 128, 64, 4)] == (29, 235)
    assert len(masks) == 8  # the bf16 tiles of the build
    for lines, instructions in masks.values():
        assert 7 <= instructions / lines <= 9  # compares and selects, about eight a 128-byte line


@pytest.mark.parametrize("d, stem", [(64, "session18/causal-short/ncu-v2-d64-n512"),
                                     (128, "fa2-sass/ncu-v2-d128-n4096")])
def test_the_executed_lines_agree_with_the_static_count(d, stem):
    causal, plain = (str(RESULTS / f"{stem}-c{c}-sass.txt.gz") for c in (1, 0))
    lines, instructions = code_lines.mask(causal, plain)
    static = code_lines.sass_masks(json.loads((RESULTS / "session39/v2-sass-counts.json").read_text()))
    s_lines, s_instructions = static["flashsim", d, 128, 128 if d == 64 else 64, 4]
    assert abs(lines - s_lines) <= 1 and abs(instructions - s_instructions) <= 0.05 * s_instructions


def test_bad_input_is_one_line_and_status_2(capsys, tmp_path):
    assert code_lines.main(["--mask", "only-one.csv"]) == 2
    assert "usage" in capsys.readouterr().err
    assert code_lines.main(["--mask-sass", str(tmp_path / "absent.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "absent.json" in err[0]
