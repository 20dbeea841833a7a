"""The units time is made of: processor sharing with per-request caps, warps bound to sub-partitions,
and the chip ports' fair sharing among requesters."""

from __future__ import annotations

import pytest
from flashsim.algorithms.ir import RMEM, Gemm, Kernel, Role
from flashsim.hw_profiles import load_profile
from flashsim.simulator.gpu import Gpu
from flashsim.simulator.resources import SharedUnit
from flashsim.simulator.timing import pipe_share


def test_processor_sharing_splits_the_rate_evenly():
    unit = SharedUnit("u", 4.0)
    a, b = unit.submit(0, 100), unit.submit(0, 100)
    assert unit.estimate(0, a) == pytest.approx(50) and unit.estimate(0, b) == pytest.approx(50)
    assert unit.busy_cycles(60) == pytest.approx(50)


def test_a_capped_request_leaves_the_rest_to_the_others():
    """A request that may use a quarter of the rate gets it; the uncapped one takes the other three quarters,
    then the capped one stays at its cap on the idle unit."""
    unit = SharedUnit("u", 4.0)
    capped, free = unit.submit(0, 100, cap=0.25), unit.submit(0, 30)
    assert unit.estimate(0, free) == pytest.approx(10)
    assert unit.estimate(0, capped) == pytest.approx(100)
    assert unit.estimate(50, capped) == pytest.approx(100)
    assert unit.busy_cycles(200) == pytest.approx(130 / 4)  # busy counts the rate used, not the time


def test_two_capped_requests_share_what_their_caps_allow():
    unit = SharedUnit("u", 4.0)
    a, b = unit.submit(0, 100, cap=0.75), unit.submit(0, 100, cap=0.75)
    assert unit.estimate(0, a) == pytest.approx(50) and unit.estimate(0, b) == pytest.approx(50)


@pytest.mark.parametrize("warps,share", [(1, 0.25), (2, 0.5), (4, 1.0), (6, 0.75), (8, 1.0), (12, 1.0)])
def test_pipe_share_of_warps_on_four_sub_partitions(warps, share):
    assert pipe_share(warps, 4) == share


def _gemm_cycles(warps: int) -> int:
    """One 128 x 128 x 64 mma.sync GEMM (operands in registers) by one thread block of `warps` warps on an
    otherwise idle SM."""
    profile = load_profile("h100")

    def program(cta):
        yield Gemm("acc", "a", "b", 128, 128, 64, RMEM, RMEM, "mma_sync", "bf16", warps, trans_b=True)

    kernel = Kernel("gemm", [(0, 0, 0)], (Role("warps", warps, program),), 0, 32)
    gpu = Gpu(profile, 1)
    cycles, _, _ = gpu.run_kernel(kernel, lambda: {}, extrapolate=False)
    return cycles - gpu.launch_fixed_cycles()  # the kernel's start and end, the same for any block


def test_one_warp_uses_one_sub_partition_of_the_tensor_cores():
    one, four = _gemm_cycles(1), _gemm_cycles(4)
    launch = load_profile("h100").cta_launch_cycles  # paid once either way, as is the latency
    assert one - launch > 3 * (four - launch)  # a quarter of the rate
    assert _gemm_cycles(8) == pytest.approx(four, rel=0.01)


def _integrate(requests, rates, dt: float = 1e-3) -> dict[int, float]:
    """Finish times of requests (arrival, work, ...) by small steps: rates(arrived, left) gives each arrived,
    unfinished request's rate for the next step."""
    left = {i: r[1] for i, r in enumerate(requests)}
    done, t = {}, 0.0
    while left:
        arrived = [i for i in sorted(left) if requests[i][0] <= t + 1e-12]
        for i, rate in rates(arrived, requests).items():
            left[i] -= rate * dt
            if left[i] <= 0:
                done[i] = t + dt
                del left[i]
        t += dt
    return done


def _water_filling(rate: float):
    """Processor sharing where a request (arrival, work, cap) takes at most cap x rate."""

    def rates(arrived, requests):
        out, share_left, n = {}, rate, len(arrived)
        for i in sorted(arrived, key=lambda i: requests[i][2]):
            out[i] = min(requests[i][2] * rate, share_left / n)
            share_left -= out[i]
            n -= 1
        return out

    return rates


def _fair_share(rate: float):
    """A port's sharing: `rate` split equally among the flows of requests (arrival, work, flow) with one in
    service, each flow serving its own in arrival order."""

    def rates(arrived, requests):
        heads = {}
        for i in arrived:  # a flow's earliest outstanding request
            heads.setdefault(requests[i][2], i)
        return {i: rate / len(heads) for i in heads.values()}

    return rates


@pytest.mark.parametrize("seed", range(6))
def test_capped_sharing_matches_a_step_by_step_integration(seed):
    import random

    rng = random.Random(seed)
    requests = [(rng.choice((0, 0, 1, 2, 5)), rng.uniform(1, 20), rng.choice((0.25, 0.5, 0.75, 1.0)))
                for _ in range(rng.randint(2, 6))]
    requests.sort(key=lambda r: r[0])
    unit, ids = SharedUnit("u", 4.0), []
    for arrival, work, cap in requests:
        ids.append(unit.submit(arrival, work, cap))
    expected = _integrate(requests, _water_filling(4.0))
    for i, rid in enumerate(ids):
        assert unit.estimate(1000, rid) == pytest.approx(expected[i], abs=0.02)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("cap", (0.2, 0.5, 1.0))
def test_requests_capped_alike_match_a_step_by_step_integration(seed, cap):
    """Block shares cap every request alike, which takes the unit's one-rate path (min(cap, rate / n)
    each); estimates asked while requests arrive, and asked again with nothing new, are the ones the
    integration gives once every request is in."""
    import random

    rng = random.Random(seed)
    requests = sorted((rng.choice((0, 0, 1, 3, 7)), rng.uniform(1, 20), cap) for _ in range(rng.randint(1, 6)))
    unit, ids = SharedUnit("u", 4.0), []
    for arrival, work, c in requests:
        ids.append(unit.submit(arrival, work, c))
        for rid in ids:  # an estimate now, then the memo of it: later arrivals must invalidate both
            assert unit.estimate(arrival, rid) == unit.estimate(arrival, rid)
    expected = _integrate(requests, _water_filling(4.0))
    for i, rid in enumerate(ids):
        assert unit.estimate(requests[-1][0], rid) == pytest.approx(expected[i], abs=0.02)
    assert unit.busy_cycles(1000) == pytest.approx(sum(w for _, w, _ in requests) / 4.0)


@pytest.mark.parametrize("seed", range(6))
def test_port_matches_a_step_by_step_integration(seed):
    """The port's virtual-time bookkeeping against fair sharing integrated directly: each request is
    announced at the cycle it is through (within the integration's step), plus its latency."""
    import math
    import random

    import simpy
    from flashsim.simulator.resources import Port

    rng = random.Random(seed)
    requests = sorted(((rng.choice((0, 0, 3, 7, 20)), rng.uniform(10, 400), rng.randint(0, 3))
                       for _ in range(rng.randint(3, 9))), key=lambda r: r[0])
    latency = rng.choice((0, 5))
    env = simpy.Environment()
    port = Port(env, "l2", 16.0)
    seen: dict[int, int] = {}

    def issue(i, arrival, work, flow):
        yield env.timeout(arrival)
        port.submit(env.now, work, lambda c, i=i: seen.setdefault(i, c), flow, latency)

    for i, (arrival, work, flow) in enumerate(requests):
        env.process(issue(i, arrival, work, flow))
    env.run()
    expected = _integrate(requests, _fair_share(16.0))
    for i, t_out in expected.items():
        assert abs(seen[i] - (math.ceil(t_out) + latency)) <= 1, (i, seen[i], t_out)
    assert port.busy_cycles(env.now) == pytest.approx(sum(w for _, w, _ in requests) / 16.0)


def test_two_requests_under_mixed_caps_finish_as_the_water_filling_loop_says():
    """SharedUnit._play_two is the loop's arithmetic for two requests, to the last bit."""
    import random

    rng = random.Random(7)
    for _ in range(2000):
        unit = SharedUnit("u", rng.choice([1.0, 2.0, 128.0, 1024.0]))
        t0 = rng.uniform(0, 1e6)
        for _ in range(2):
            cap = rng.choice([1.0, 0.5, 0.25, rng.uniform(0.05, 1.0)])
            unit.submit(t0, rng.choice([rng.uniform(1e-3, 1e6), 4096.0]), cap)
        for rid in list(unit.active):
            two = unit._play_two(rid)
            assert two is None or two == unit._play_loop(rid)
