"""How long an ldmatrix-fed mma.sync GEMM takes on an SM, from its warps' instructions replayed one by one.

The simulator's ldmatrix latency under ldsm_model 2 (the profiles' default): each ldmatrix-fed GEMM lasts past
its loads alone by what this replay finds (ldsm_model 1 is the older closed form, max(products alone, loads
alone + 43 / n^2 per k-step), which misses the 16-row warp tiles of d256 by up to 26%;
experiments/results/h200/session28/candidate-gemm-replay/ compares the two on every development set).

A warp of such a GEMM issues, in program order, ldmatrix.x4 loads of its A and B fragments and the m16n8k16
products that read them. The compiler hoists each load ahead of the products that need it, as far as its
registers allow; what the loads' latency costs depends on that distance, on how many warps share a
sub-partition and on whether the shared-memory port or the tensor pipe is the busier (ldsm_form's tiles of
16-row warps, d256's, hide most of it; our 32-row tiles at one warp per sub-partition pay about 40 cycles a
k-step). The closed form misses one or the other; the replay:

- each warp sits on sub-partition w % 4, which issues one instruction a cycle, round robin over its ready warps;
- a load enters the SM's shared-memory port one cycle after issue, in the order loads reach it, and takes
  512 B / the port's bytes per cycle there; its fragment is usable `latency` cycles after it leaves;
- a product waits for its fragments and for its sub-partition's tensor pipe, which takes one m16n8k16 at a
  time (4 x the SM's cycles per HMMA).

The order is a kernel's own, read off its SASS (experiments/sass_orders.py), or one from `issue_order`: loads
in the order the products consume them, kept `ahead` loads in front. With the ldsm_form microbenchmark's own
orders one latency reproduces all its 38 tile points (`experiments/gemm_replay_fit.py`); on our kernels' and
SDPA flash's forward GEMMs the generated order (ahead 8) replays within 11% of their own.
"""

from __future__ import annotations

import math
from functools import lru_cache

SUB_PARTITIONS = 4
FRAGMENT_BYTES = 512  # an ldmatrix.x4: four 8x8 16-bit matrices, one m16 x k16 (or k8 of tf32) fragment


def warp_tile(m: int, n: int, k: int, warps: int, split: str, a_smem: bool, hmma_k: int) -> tuple | None:
    """(m16 tiles, n16 fragments, k-steps, A loaded from shared memory) of one warp's part of the product, as
    the GEMM's `split` deals it out; None where the warps share no whole tile (the GEMM is not replayed)."""
    rows, cols, depth = m, n, k
    if split == "m":
        rows = m // warps
    elif split == "n":
        cols = n // warps
    elif split == "k":
        depth = k // warps
    elif "x" in split:
        r, c = map(int, split.split("x"))
        rows, cols = m // r, n // c
    if rows < 16 or cols < 16 or depth < hmma_k:
        return None
    return -(-rows // 16), -(-cols // 16), -(-depth // hmma_k), a_smem


def issue_order(mt: int, nt2: int, ksteps: int, a_smem: bool, ahead: int) -> str:
    """One warp's instructions, 'L' a fragment load and 'm' a product: per k-step the MT A fragments (when
    loaded) and then each n16 B fragment, before the 2 x MT products that read it; the first `ahead` loads
    come first and every group of products is followed by the loads that keep `ahead` in front of it."""
    per_step = mt * a_smem + nt2
    total = per_step * ksteps
    out, issued = [], 0

    def needs(group: int) -> int:  # the last load a group of products reads
        step, frag = divmod(group, nt2)
        return step * per_step + mt * a_smem + frag

    for group in range(ksteps * nt2):
        front = needs(group - 1) + 1 + ahead if group else ahead
        target = max(needs(group) + 1, min(total, front))
        out.append("L" * max(0, target - issued))
        issued = max(issued, target)
        out.append("m" * (2 * mt))
    return "".join(out)


def program(order: str, mt: int, nt2: int, ksteps: int, a_smem: bool) -> tuple[int, ...]:
    """The order as one int per instruction: -1 a load; for a product, the index of the last load it reads
    (a warp's loads leave the port in issue order, so that one landing means all of them have)."""
    per_step = mt * a_smem + nt2
    loads = order.count("L")
    if loads != per_step * ksteps or order.count("m") != 2 * mt * nt2 * ksteps:
        raise ValueError(f"order of {loads} loads and {order.count('m')} products does not fit a warp tile of "
                         f"{mt} x {nt2} fragments over {ksteps} k-steps")
    out, product = [], 0
    for ch in order:
        if ch == "L":
            out.append(-1)
            continue
        step, rest = divmod(product // (2 * mt), nt2)
        b = step * per_step + mt * a_smem + rest
        a = step * per_step + (product % (2 * mt)) // 2 if a_smem else -1
        out.append(max(a, b))
        product += 1
    return tuple(out)


@lru_cache(maxsize=256)
def replay(prog: tuple[int, ...], warps: int, port_cycles: float, hmma_cycles: float, latency: float) -> float:
    """Cycles from the first issue until the last product leaves its tensor pipe, `warps` warps each running
    `prog` (module docstring)."""
    n = len(prog)
    sps = [list(range(s, warps, SUB_PARTITIONS)) for s in range(SUB_PARTITIONS)]
    sps = [ws for ws in sps if ws]
    pc = [0] * warps
    landed = [[0.0] * n for _ in range(warps)]  # per warp, when each of its loads is usable
    nloads = [0] * warps
    pipe = [0.0] * len(sps)
    turn = [0] * len(sps)
    port = 0.0
    last = 0.0
    t = 0
    while True:
        wake = math.inf
        busy = False
        for s, ws in enumerate(sps):
            k = len(ws)
            for j in range(k):
                w = ws[(turn[s] + j) % k]
                if pc[w] >= n:
                    continue
                busy = True
                need = prog[pc[w]]
                if need < 0:
                    port = max(t + 1.0, port) + port_cycles
                    landed[w][nloads[w]] = port + latency
                    nloads[w] += 1
                else:
                    at = max(landed[w][need], pipe[s] - 1.0)
                    if at > t:
                        wake = min(wake, at)
                        continue
                    pipe[s] = max(pipe[s], t) + hmma_cycles
                    last = max(last, pipe[s])
                pc[w] += 1
                turn[s] = (turn[s] + j + 1) % k
                wake = t + 1
                break
        if not busy:
            return last
        t = max(t + 1, math.ceil(wake))


@lru_cache(maxsize=4096)
def exposed_cycles(tile: tuple, warps: int, ahead: int, port_cycles: float, hmma_cycles: float,
                   latency: float) -> float:
    """Cycles the GEMM of warp tile `tile` (warp_tile), `warps` warps of it on the SM, lasts past its loads
    alone (each warp's fragment loads at the port's rate), its order generated with `ahead` loads in front."""
    order = issue_order(*tile, ahead)
    cycles = replay(program(order, *tile), warps, port_cycles, hmma_cycles, latency)
    return max(0.0, cycles - order.count("L") * warps * port_cycles)
