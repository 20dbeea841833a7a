"""The instruction-fetch microbenchmark's premise: each of its lines is 128 bytes of SASS, straight-line."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from flashsim.experiments import calibrate_gpu
from flashsim.experiments.ifetch_probe import AHEAD, BRANCH_POINTS, LINE_BYTES, LINES, PAIR_LINES, PATTERNS


def text_sizes(cubin: Path) -> dict[str, int]:
    """Bytes of each kernel's .text section, from the ELF64 section headers."""
    data = cubin.read_bytes()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]

    def name(off: int) -> str:
        return data[names_at + off : data.index(b"\0", names_at + off)].decode()

    return {name(h[0])[len(".text.") :]: h[5] for h in headers if name(h[0]).startswith(".text.")}


@pytest.fixture(scope="module")
def sizes(tmp_path_factory) -> dict[str, int]:
    """Each ifetch kernel's code bytes, from one fresh build of the source (a build takes half a minute)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    return text_sizes(calibrate_gpu.compile_cubin("ifetch", "sm_90a", tmp_path_factory.mktemp("ifetch"), force=True))


@pytest.mark.nvcc
def test_each_line_is_128_bytes_of_code(sizes: dict[str, int]) -> None:
    for small, big in zip(LINES, LINES[1:], strict=False):
        grown = sizes[f"ifetch_l{big}"] - sizes[f"ifetch_l{small}"]
        assert grown == (big - small) * LINE_BYTES, (small, big, sizes)


@pytest.mark.nvcc
def test_branching_units_are_their_lines_of_code(sizes: dict[str, int]) -> None:
    """A unit of ifetch_b7 is two 128-byte lines, of ifetch_b23 four: the code sizes the sweep names."""
    for skip, per_unit in ((7, 2), (23, 4)):
        points = [lines for s, lines in BRANCH_POINTS if s == skip]
        for small, big in zip(points, points[1:], strict=False):
            grown = sizes[f"ifetch_b{skip}_u{big // per_unit}"] - sizes[f"ifetch_b{skip}_u{small // per_unit}"]
            assert grown == (big - small) * LINE_BYTES, (skip, small, big, sizes)


@pytest.mark.nvcc
def test_attention_shaped_kernels_hold_their_stretches_once(sizes: dict[str, int]) -> None:
    """Each ifetch_p kernel is its prologue, loop body and epilogue lines plus the same tile-loop code: no
    stretch hoisted out of the tile loop or peeled into a second copy (which would change what it fetches)."""
    extra = {sizes[f"ifetch_{kind}p{p}_l{loop}_e{e}"] - (p + loop + e) * LINE_BYTES
             for p, loop, e in PATTERNS for kind in ("", "c_", "m_")}  # independent, chained and mixed lines alike
    assert len(extra) == 1 and 0 < extra.pop() <= 32 * LINE_BYTES


@pytest.mark.nvcc
def test_pair_and_ahead_kernels_hold_the_code_they_name(sizes: dict[str, int]) -> None:
    """An ifetch_pair kernel holds two loops of its lines (X and Y, neither merged into the other) and an
    ifetch_ahead kernel its slow lines and its fast ones, each beside the same fixed code."""
    pair = {sizes[f"ifetch_pair_{kind}l{n}"] - 2 * n * LINE_BYTES for n in PAIR_LINES for kind in ("", "c_", "m_")}
    assert len(pair) == 1 and 0 < pair.pop() <= 32 * LINE_BYTES
    ahead = {sizes[f"ifetch_ahead_s{slow}_f{fast}"] - (slow + fast) * LINE_BYTES for slow, fast in AHEAD}
    assert len(ahead) == 1 and 0 < ahead.pop() <= 32 * LINE_BYTES
