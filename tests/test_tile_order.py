"""The v3 work-tile order and grid rule (algorithms/tile_order.py) that the schedule and the kernels share."""

from __future__ import annotations

from dataclasses import replace

from flashsim.algorithms import tile_order
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import v3
from flashsim.algorithms.tiling import Tiling


def test_every_order_lists_each_tile_once():
    for pairs, blocks, section in ((7, 5, 0), (7, 5, 1), (7, 5, 3), (7, 5, 7), (7, 5, 40), (1, 1, 1)):
        order = tile_order.tiles(pairs, blocks, section)
        assert sorted(order) == [(p, i) for p in range(pairs) for i in range(blocks)]


def test_head_order_and_sections():
    # section 0: one head after another, its last (longest causal) query block first
    assert tile_order.tiles(2, 3, 0) == [(0, 2), (0, 1), (0, 0), (1, 2), (1, 1), (1, 0)]
    # sections of 2 pairs over 3 pairs: the last section holds one
    assert tile_order.tiles(3, 2, 2) == [(0, 1), (1, 1), (0, 0), (1, 0), (2, 1), (2, 0)]
    order = tile_order.tiles(10, 6, 4)
    for start in range(0, 10, 4):  # inside a section, query blocks never grow: longest first
        blocks = [i for p, i in order if start <= p < start + 4]
        assert blocks == sorted(blocks, reverse=True)


def test_sections_fit_the_l2_budget_and_only_causal_uses_them():
    assert tile_order.section_pairs(False, 16384, 128, 2, 1, 64) == 0
    # 1k keys, d128, bf16: 512 KiB of K/V per head, 32 heads share the section's 16 MiB
    assert tile_order.section_pairs(True, 1024, 128, 2, 1, 256) == 32
    assert tile_order.section_pairs(True, 1024, 128, 2, 4, 256) == 128  # GQA 4: a K/V head per 4 pairs
    assert tile_order.section_pairs(True, 1024, 128, 2, 1, 8) == 8  # never more pairs than there are
    assert tile_order.section_pairs(True, 131072, 256, 2, 1, 4) == 1  # one head over the budget: one pair
    assert tile_order.persistent(False, 1 << 17, 256, 2, 128)
    # causal: persistent with 192-row tiles and heads of at most 1 MiB of K/V
    assert tile_order.persistent(True, 4096, 64, 2, 192) and not tile_order.persistent(True, 8192, 64, 2, 192)
    assert not tile_order.persistent(True, 1024, 128, 2, 128)
    assert tile_order.persistent(True, 8192, 64, 1, 192)  # fp8: half the bytes


def test_prefetch_where_two_q_tiles_fit_for_16_bit_d64_and_d128():
    for causal in (False, True):
        for n in (512, 16384):
            assert tile_order.prefetch(causal, n, 128, 2, 128, 128) and tile_order.prefetch(causal, n, 64, 2, 192, 128)
    assert not tile_order.prefetch(False, 1024, 128, 2, 128, 176)  # 64 + 176 KiB: no room
    assert not tile_order.prefetch(True, 1024, 128, 1, 128, 128)  # fp8: no two-Q-buffer kernels
    assert not tile_order.prefetch(True, 1024, 96, 2, 192, 112)  # not built for d96


def test_v3_schedule_launches_the_shared_order():
    p = Problem(batch=2, heads=4, seqlen_q=1024, headdim=128, causal=True)
    (kernel,) = v3.build(p, Tiling(128, 128, 12, 2)).kernels
    assert kernel.persistent  # the two-Q-buffer kernel: persistent, the second Q tile in shared memory
    assert kernel.smem_bytes == v3.smem_bytes(p, Tiling(128, 128, 12, 2)) + 128 * 128 * 2
    section = tile_order.section_pairs(True, 1024, 128, 2, 1, 8)
    assert [(b * 4 + h, i) for b, h, i in kernel.ctas] == tile_order.tiles(8, 8, section)
    (per_tile,) = v3.build(replace(p, headdim=192), Tiling(128, 112, 12, 2)).kernels
    assert not per_tile.persistent  # causal d192, a 128-row tile: one block per tile
    short = Problem(batch=1, heads=4, seqlen_q=4096, headdim=64, causal=True)
    assert v3.build(short, Tiling(192, 128, 16, 2)).kernels[0].persistent
    assert (
        v3.build(Problem(batch=1, heads=4, seqlen_q=4096, headdim=128), Tiling(128, 176, 12, 2)).kernels[0].persistent
    )
