"""The short-launch experiment's plan and its reading of the profile (no GPU needed)."""

from __future__ import annotations

from flashsim.experiments.bench_decode_start import DECODE, HEADS, MARKER, after_marker
from flashsim.experiments.validate import decode_test_set


def test_no_decode_test_set_shape_runs():
    held_out = {(c.batch, c.heads, c.kv_heads, c.seqlen_k, c.headdim) for c in decode_test_set()}
    for batch, group, nk, d, _ in DECODE:
        assert (batch, HEADS, HEADS // group, nk, d) not in held_out


def test_only_the_timed_launchs_kernels_after_each_marker_count():
    events = [
        ("write_cg", 90.0), ("flashsim_decode_fwd", 5.0), ("flashsim_decode_combine", 2.0),  # the warm-up call
        (MARKER, 1.0), ("fill", 0.5), ("flashsim_decode_fwd", 6.0), ("flashsim_decode_combine", 3.0),
        ("write_cg", 90.0), (MARKER, 1.0), ("flashsim_decode_fwd", 7.0), ("flashsim_decode_combine", 4.0),
    ]
    assert after_marker(events, "flashsim_decode", 2) == [
        {"flashsim_decode_fwd": 6.0, "flashsim_decode_combine": 3.0},
        {"flashsim_decode_fwd": 7.0, "flashsim_decode_combine": 4.0},
    ]
    assert after_marker(events, "flashsim_decode", 1) == [{"flashsim_decode_fwd": 6.0}, {"flashsim_decode_fwd": 7.0}]
