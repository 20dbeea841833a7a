"""What a library's call launches beside its simulated kernels (simulator/calls.py)."""

from __future__ import annotations

import pytest
from flashsim.hw_profiles import load_profile
from flashsim.simulator.calls import CALLS, call_busy_s


@pytest.mark.parametrize("hw", ["h200", "h100", "a100"])
def test_cudnn_forward_calls_add_one_memset_of_the_profile(hw: str) -> None:
    profile = load_profile(hw)
    assert call_busy_s("cudnn-sm90", profile) == {"memset_s": profile.memset_busy_s}
    assert 0 < profile.memset_busy_s < 1e-5  # a few bytes' memset: microseconds, not more


@pytest.mark.parametrize("launch", [None, "", "fa2", "an unknown library"])
def test_calls_that_launch_their_kernels_alone_add_nothing(launch) -> None:
    assert call_busy_s(launch, load_profile("h200")) == {}


def test_the_memset_follows_the_profile_number() -> None:
    profile = load_profile("h200").with_overrides(["memset_busy_s=2e-6"])
    assert call_busy_s("cudnn-sm90", profile)["memset_s"] == pytest.approx(2e-6 * CALLS["cudnn-sm90"].memsets)


@pytest.mark.parametrize("hw", ["h200", "h100"])
def test_the_hopper_memsets_are_measured(hw: str) -> None:
    assert load_profile(hw).sources["memset_busy_s"].startswith("measured:")
