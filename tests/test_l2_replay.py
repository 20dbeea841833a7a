"""The L2's replay of loads a loop skip leaves out changes the cache exactly as reading them one by one
would: the same lines in the same LRU order with the same pieces, room and landing cycles, the same bytes
counted and the same lines evicted (tiles wholly there take a shortcut, tiles with pieces missing do not)."""

from __future__ import annotations

import random

import pytest
from flashsim.algorithms.ir import SMEM, GTile, Load
from flashsim.simulator.l2 import L2Cache, held


def _loads(seed: int) -> list:
    rng = random.Random(seed)
    tiles = [
        GTile(t, 0, h, 16 * rng.randrange(12), rng.choice((16, 32, 64)), 0, rng.choice((64, 128)), 2)
        for t in ("K", "V")
        for h in range(2)
        for _ in range(6)
    ]
    return [Load(rng.choice(tiles), "sK", SMEM, "tma", "full") for _ in range(400)]


def _state(l2: L2Cache) -> tuple:
    return (
        [(key, list(entry)) for key, entry in l2.lines.items()],
        l2.used,
        l2.read_bytes,
        l2.miss_bytes,
        l2.evictions,
        l2.evicted_dirty_bytes,
    )


@pytest.mark.parametrize("capacity", [60_000, 200_000])
def test_replay_is_reading_the_loads_one_by_one(capacity: int) -> None:
    """60 kB: tiles over half the cache, read line by line; 200 kB: tiles wholly missing go in at once."""
    for seed in range(4):
        loads = _loads(seed)
        plain, replayed = L2Cache(capacity), L2Cache(capacity)  # small: the loads evict now and then
        for l2 in (plain, replayed):
            l2.write(GTile("O", 0, 0, 0, 64, 0, 128, 2))  # a dirty tile, written back when evicted
        now = 100
        for op in loads:
            _, _, _, missed = plain.read(op.src, now, 2.0)
            for entry in missed:
                entry[2] = now
        replayed.replay(loads, now, {"K": 2.0, "V": 2.0}, 1.0)
        assert _state(replayed) == _state(plain)
        assert plain.evictions > 0 and plain.evicted_dirty_bytes > 0


def test_held_asks_every_line_for_its_pieces() -> None:
    there = [[0.0, False, None, 0b1111, 1.0], [0.0, False, None, 0b0011, 1.0]]
    assert held(there, (0b1111, 0b0011)) and held(there, (0b0101, 0b0001))
    assert not held(there, (0b1111, 0b0111)) and not held([there[0], None], (0b1, 0b1))


def test_a_replay_told_every_line_is_there_only_moves_them() -> None:
    """loopskip._fits tells replay which stretches find every line there: moving their lines to the LRU end
    without looking is what looking would have done."""
    loads = _loads(7)
    warm = L2Cache(10_000_000)
    warm.replay(loads, 5, {}, 1.0)  # every tile in, nothing evicted
    told, looked = L2Cache(10_000_000), L2Cache(10_000_000)
    for l2 in (told, looked):
        l2.replay(loads, 5, {}, 1.0)
    again = list(reversed(loads))
    told.replay(again, 9, {}, 1.0, all_held=True)
    looked.replay(again, 9, {}, 1.0)
    assert _state(told) == _state(looked) and _state(told) != _state(warm)
