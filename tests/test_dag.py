"""The tile-op dependency graph of one thread block (networkx) and its critical path."""

from __future__ import annotations

import networkx as nx
import pytest
from flashsim.algorithms import Problem, Tiling
from flashsim.algorithms.dag import critical_path, op_graph
from flashsim.algorithms.explain import explain
from flashsim.algorithms.ir import SMEM, Arrive, Gemm, Kernel, Load, Role, Wait
from flashsim.algorithms.parts import row_tile
from flashsim.algorithms.schedules import build
from flashsim.errors import FlashsimError

P = Problem(1, 1, 256, 64)


def _kernel(producer, consumer) -> Kernel:
    return Kernel("k", [(0, 0, 0)], (Role("producer", 4, producer), Role("consumer", 4, consumer)), 0, 64)


def test_edges_follow_buffers_and_barriers():
    """The consumer's GEMM waits for the producer's load through the barrier and reads its buffer."""
    def producer(cta):
        yield Load(row_tile(P, "Q", 0, 0, 0, 64), "sQ", SMEM, "tma", "full")
        yield Load(row_tile(P, "K", 0, 0, 0, 64, kv=True), "sK", SMEM, "tma", "full")

    def consumer(cta):
        yield Wait("full", 2)
        yield Gemm("S", "sQ", "sK", 64, 64, 64, SMEM, SMEM, "wgmma", "bf16", 4, trans_b=True)
        yield Arrive("done")

    g = op_graph(_kernel(producer, consumer), (0, 0, 0))
    load_q, load_k, wait, gemm, arrive = ("producer", 0), ("producer", 1), ("consumer", 0), ("consumer", 1), \
        ("consumer", 2)
    assert set(g.edges) == {(load_k, wait), (load_q, gemm), (load_k, gemm), (wait, gemm), (wait, arrive)}
    cp = critical_path(_kernel(producer, consumer), (0, 0, 0))
    assert cp.length == 3 and cp.flops == 2 * 64 * 64 * 64 and cp.kinds == {"Load": 1, "Wait": 1, "Gemm": 1}


def test_roles_that_wait_forever_are_refused():
    def a(cta):
        yield Wait("x", 1)
        yield Arrive("y")

    def b(cta):
        yield Wait("y", 1)
        yield Arrive("x")

    with pytest.raises(FlashsimError, match="wait on each other forever"):
        op_graph(_kernel(a, b), (0, 0, 0))


@pytest.mark.parametrize("n", [1, 3, 5])
def test_v2_chains_every_gemm(n):
    """V2's block syncs its warps around every K/V step and carries m, l and O from step to step, so every
    GEMM of the block lies on one chain."""
    p = Problem(1, 1, 64, 64, seqlen_k=64 * n)
    kernel = build("v2", p, Tiling(64, 64, 4, 2)).kernels[0]
    g = op_graph(kernel, kernel.ctas[0])
    assert nx.is_directed_acyclic_graph(g)
    cp = critical_path(kernel)
    assert cp.kinds["Gemm"] == 2 * n and cp.flops == 2 * n * 2 * 64 * 64 * 64


def test_v3_consumers_overlap_their_qk_gemms():
    """A V3 consumer's S_j = Q K_j^T do not wait for each other; only the P V accumulation chains: the path
    holds S_0 and the n P V GEMMs of one warpgroup, not all 2n, and fewer ops than the block."""
    n = 4
    p = Problem(1, 1, 128, 64, seqlen_k=128 * n)
    kernel = build("v3", p, Tiling(128, 128, 12, 2)).kernels[0]
    cp = critical_path(kernel)
    per_gemm = 2 * 64 * 128 * 64
    assert (n + 1) * per_gemm <= cp.flops < 2 * 2 * n * per_gemm
    assert cp.length < cp.ops


def test_explain_shows_the_critical_path():
    e = explain("v2", Problem(1, 1, 256, 64, causal=True), Tiling(64, 64, 4, 2))
    assert "critical path of thread block" in e.text()
    [cp] = e.as_dict()["critical_paths"]
    # the causal block with the most K/V steps: the last one, 4 steps of 2 GEMMs
    assert cp["cta"] == [0, 0, 3] and cp["kinds"]["Gemm"] == 8
