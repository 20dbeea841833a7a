"""The L2's replay of loads a loop skip leaves out changes the cache exactly as reading them one by one
would: the same lines in the same LRU order with the same pieces, room and landing cycles, the same bytes
counted and the same lines evicted (tiles wholly there take a shortcut, tiles with pieces missing do not)."""

from __future__ import annotations

import random

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


def test_replay_is_reading_the_loads_one_by_one() -> None:
    for seed in range(4):
        loads = _loads(seed)
        plain, replayed = L2Cache(60_000), L2Cache(60_000)  # small: the loads evict now and then
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
