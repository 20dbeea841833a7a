"""The dependency graph of one thread block's tile ops, and its critical path (networkx).

Nodes are the ops every role of the block issues; an edge u -> v says v cannot start before u:
- v reads a buffer u wrote last (read after write; registers are per role, shared memory per block);
- v is a Wait, and u made the arrival that lets it pass (u: an async Load on that barrier or an Arrive);
  which arrival that is comes from running the roles as the numeric interpreter does (round robin, a role
  parks on a Wait until its target is reached), without computing anything;
- v is a GemmWait and u the async GEMM it waits for;
- the role's ops after a Wait, GemmWait or SyncThreads depend on it (they block the role), and a SyncThreads
  depends on every op the role issued since the previous one.
The critical path is the chain of dependent ops with the most tensor-core FLOPs (ties: the most ops); its
FLOPs, bytes and ops are summed, no time is attached: how long it takes is the timing interpreter's question.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import networkx as nx
from flashsim.errors import FlashsimError

from .ir import (
    SMEM,
    Arrive,
    AtomicAdd,
    Fill,
    Gemm,
    GemmWait,
    Kernel,
    Load,
    LseExp,
    MergeSplits,
    Normalize,
    OnlineSoftmax,
    Quantize,
    Rescale,
    RescaleMerge,
    RowDot,
    RowMax,
    RowSoftmax,
    SoftmaxGrad,
    Store,
    StoreShared,
    SyncThreads,
    Wait,
    WarpReduce,
)

# Thread blocks of a kernel compared to find the one with the longest program (the same (batch, head)).
CANDIDATES = 256


def reads_writes(op) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Buffer names an op reads and writes."""
    if isinstance(op, Load):
        return (), (op.dst,)
    if isinstance(op, Store):
        return (op.src,), ()
    if isinstance(op, Gemm):
        reads = (op.a, op.b, *(s for s in (op.a_scale, op.b_scale) if s), *((op.dst,) if op.accumulate else ()))
        return reads, (op.dst,)
    if isinstance(op, OnlineSoftmax):
        acc = (op.acc,) if op.acc and not op.corr else ()
        ahead = (op.max_in,) if op.max_in else ()
        return (op.s, op.m, op.l, *acc, *ahead), (op.p, op.m, op.l, *((op.corr,) if op.corr else acc))
    if isinstance(op, RowMax):
        return (op.s, op.m), (op.s, op.out)
    if isinstance(op, Rescale):
        return (op.acc, op.corr), (op.acc,)
    if isinstance(op, RescaleMerge):
        return (op.o, op.pv, op.m, op.l, op.m_tile, op.l_tile), (op.o, op.m, op.l)
    if isinstance(op, WarpReduce):
        return (op.src,), (op.dst,)
    if isinstance(op, Normalize):
        return (op.acc, op.m, op.l), (op.acc, *((op.lse,) if op.lse else ()))
    if isinstance(op, RowSoftmax):
        return (op.s,), (op.p,)
    if isinstance(op, MergeSplits):
        return (op.o_parts, op.lse_parts), (op.o, op.lse)
    if isinstance(op, Quantize):
        return (op.src,), (op.dst, op.scale)
    if isinstance(op, Fill):
        return (), (op.dst,)
    if isinstance(op, (AtomicAdd, StoreShared)):
        return (op.src,), ((op.dst,) if isinstance(op, StoreShared) else ())
    if isinstance(op, RowDot):
        return (op.a, op.b), (op.dst,)
    if isinstance(op, LseExp):
        return (op.s, op.lse), (op.p,)
    if isinstance(op, SoftmaxGrad):
        return (op.p, op.dp, op.d), (op.ds,)
    return (), ()


def op_bytes(op) -> int:
    """Global-memory bytes an op moves (Loads and Stores)."""
    return op.nbytes if isinstance(op, (Load, Store)) else 0


def op_flops(op) -> int:
    return op.flops if isinstance(op, Gemm) else 0


def op_graph(kernel: Kernel, cta: tuple) -> nx.DiGraph:
    """The dependency graph of `cta`'s ops (module docstring); nodes are (role, index) with the op in 'op'."""
    g = nx.DiGraph()
    programs = {role.name: role.program(cta) for role in kernel.roles}
    smem: set[str] = set()
    writer: dict[tuple, tuple] = {}  # buffer key -> node that wrote it last
    arrivals: dict[str, list] = {}  # barrier -> the node of each arrival, in order
    gemms: dict[tuple, tuple] = {}  # (role, token) -> the async GEMM issued last
    blocker: dict[str, tuple | None] = dict.fromkeys(programs)  # the last op that blocked the role
    since_sync: dict[str, list] = {name: [] for name in programs}
    pending: dict[str, Wait | None] = dict.fromkeys(programs)
    count = Counter()

    def key(role: str, name: str) -> tuple:
        return ("smem", name) if name in smem else (role, name)

    def add(role: str, op) -> tuple:
        node = (role, count[role])
        count[role] += 1
        g.add_node(node, op=op)
        if blocker[role] is not None:
            g.add_edge(blocker[role], node)
        reads, writes = reads_writes(op)
        for name in reads:
            src = writer.get(key(role, name))
            if src is not None:
                g.add_edge(src, node)
        if isinstance(op, Load) and op.level == SMEM or isinstance(op, StoreShared):
            smem.add(op.dst)
        for name in writes:
            writer[key(role, name)] = node
        if isinstance(op, Load) and op.barrier:
            arrivals.setdefault(op.barrier, []).append(node)
        elif isinstance(op, Arrive):
            arrivals.setdefault(op.barrier, []).extend([node] * op.count)
        elif isinstance(op, Gemm) and op.async_token:
            gemms[(role, op.async_token)] = node
        elif isinstance(op, GemmWait) and (role, op.token) in gemms:
            g.add_edge(gemms[(role, op.token)], node)
        if isinstance(op, SyncThreads):
            for earlier in since_sync[role]:
                g.add_edge(earlier, node)
            since_sync[role] = []
        else:
            since_sync[role].append(node)
        if isinstance(op, (Wait, GemmWait, SyncThreads)):
            blocker[role] = node
        return node

    live = dict(programs)
    while live:
        progressed = False
        for role in list(live):
            while True:
                wait = pending[role]
                if wait is not None:
                    got = arrivals.get(wait.barrier, [])
                    if len(got) < wait.target:
                        break
                    node = add(role, wait)
                    if wait.target:
                        g.add_edge(got[wait.target - 1], node)
                    pending[role] = None
                try:
                    op = next(live[role])
                except StopIteration:
                    del live[role]
                    progressed = True
                    break
                progressed = True
                if isinstance(op, Wait):
                    pending[role] = op
                else:
                    add(role, op)
        if live and not progressed:
            raise FlashsimError(f"{kernel.name}: the roles of thread block {cta} wait on each other forever")
    return g


@dataclass
class CriticalPath:
    kernel: str
    cta: tuple
    ops: int  # ops in the thread block
    length: int  # ops on the critical path
    flops: int  # tensor-core FLOPs on it
    bytes: int  # global-memory bytes its loads and stores move
    kinds: dict  # op type -> count on the path

    def kinds_text(self) -> str:
        return ", ".join(f"{n} {k}" for k, n in sorted(self.kinds.items(), key=lambda kv: (-kv[1], kv[0])))

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "cta": list(self.cta), "ops": self.ops, "length": self.length,
                "flops": self.flops, "bytes": self.bytes, "kinds": self.kinds}


_START = ("start", -1)


def longest_cta(kernel: Kernel) -> tuple:
    """The thread block (of those sharing the first one's batch and head) with the most ops."""
    first = kernel.ctas[0]
    same = [c for c in kernel.ctas if c[:2] == first[:2]][:CANDIDATES]
    return max(same, key=lambda c: sum(sum(1 for _ in role.program(c)) for role in kernel.roles))


def critical_path(kernel: Kernel, cta: tuple | None = None) -> CriticalPath:
    """The chain of ops with the most tensor FLOPs (then the most ops) through one thread block's graph
    (default: its longest block, longest_cta)."""
    cta = longest_cta(kernel) if cta is None else cta
    g = op_graph(kernel, cta)
    n = g.number_of_nodes()
    # Each edge weighs what its head adds: FLOPs first (scaled past any op count), then one op.
    w = nx.DiGraph()
    w.add_edges_from(((u, v, {"w": op_flops(g.nodes[v]["op"]) * (n + 1) + 1}) for u, v in g.edges))
    w.add_edges_from((_START, v, {"w": op_flops(g.nodes[v]["op"]) * (n + 1) + 1}) for v in g if not g.in_degree(v))
    path = nx.dag_longest_path(w, weight="w")[1:]
    ops = [g.nodes[n]["op"] for n in path]
    return CriticalPath(kernel.name, cta, n, len(path), sum(map(op_flops, ops)),
                        sum(map(op_bytes, ops)), dict(Counter(type(op).__name__ for op in ops)))
