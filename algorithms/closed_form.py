"""Closed forms of every count of algorithms/counting.py, written as each schedule's loop nest.

Each schedule is described once as a nest of loops (grid and in-block) whose steps carry what one execution
moves with full tiles (per_iter) and the exact total over the launch, the latter an expression in B, H, Hkv,
Nq, Nk, d, Br, Bc and the element sizes. Ragged last blocks and causal skipping only enter through a few
sums over q-blocks (visible K/V blocks, masked tiles). `closed_form` folds the nest into IOCounts; tests
check it equals the op-by-op count exactly, and `flashsim explain` prints the nest.

Notation: e input element bytes (1 for fp8 after quantisation), eo output bytes, eg GEMM operand bytes,
w warps, Tr / Tc q / kv blocks, n_i kv blocks q-block i visits, f32 = 4 bytes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .counting import OPERAND_BYTES, SOFTMAX_STAT_COUNT, SOFTMAX_STATS, WARP_REDUCE, IOCounts, KernelIO
from .ir import FP32_BYTES as F32
from .ir import MASK_OPS_PER_ELEMENT
from .parts import gemm_dtype, out_bytes
from .problem import Problem
from .schedules.standard import K_CHUNK, SOFTMAX_ROWS
from .schedules.v3 import WG_ROWS
from .schedules.v3_fp8 import IN_BYTES
from .tiling import Tiling, check_algo


@dataclass(frozen=True)
class Effect:
    """One count a step adds to: kind is a KernelIO field, key a tensor or 'instr/dtype' ('' for exps/alu)."""

    kind: str
    key: str
    per_iter: int
    total: int


@dataclass
class Step:
    """One op of the nest (path: the levels it moves data between, e.g. 'gmem->smem')."""

    text: str
    path: str
    execs: int
    effects: list[Effect]
    when: str = ""  # the condition under which it runs in its loop (e.g. 'j > 0'); '' = every iteration


@dataclass
class Loop:
    """var: the loop variable and what it walks; trip: iterations of one entry (the most, when they vary);
    execs: iterations over the whole launch; grid: the loop is the launch grid, not code in the block."""

    var: str
    trip: int
    execs: int
    body: list = field(default_factory=list)
    grid: bool = False
    note: str = ""


@dataclass
class KernelNest:
    name: str
    ctas: int
    threads: int
    body: list
    persistent: bool = False


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Dims:
    """The symbols of the closed forms for one problem and tiling."""

    def __init__(self, p: Problem, t: Tiling):
        self.p, self.t = p, t
        self.B, self.H, self.Hkv, self.Nq, self.Nk, self.d = (
            p.batch, p.heads, p.kv_heads, p.seqlen_q, p.seqlen_k, p.headdim)
        self.BH = self.B * self.H
        self.bm, self.bn, self.w = t.block_m, t.block_n, t.warps
        self.e, self.eo = p.elem_bytes, out_bytes(p)
        self.dt = gemm_dtype(p)
        self.eg = OPERAND_BYTES[self.dt]
        self.Tr, self.Tc = _cdiv(self.Nq, self.bm), _cdiv(self.Nk, self.bn)

    def rows(self, i: int) -> int:
        """Rows of q-block i (the last one may be ragged)."""
        return min(self.bm, self.Nq - i * self.bm)

    def visible(self, i: int) -> int:
        """n_i: K/V blocks q-block i visits; causal (bottom-right aligned) stops at the block holding the
        last key its last row sees."""
        if not self.p.causal:
            return self.Tc
        last_row = min((i + 1) * self.bm, self.Nq) - 1
        keys = min(self.Nk, max(0, last_row + self.Nk - self.Nq + 1))
        return _cdiv(keys, self.bn)

    def masked(self, row0: int, n: int) -> int:
        """Of the first n kv tiles of a tile row starting at row0, those needing a mask: from the first
        tile that reaches past what row0 sees (causal) or past the sequence end."""
        limit = min(self.Nk, row0 + self.Nk - self.Nq + 1) if self.p.causal else self.Nk
        return max(0, n - max(0, limit // self.bn))

    def kv_rows(self, n: int) -> int:
        """K (or V) rows of the first n blocks."""
        return min(n * self.bn, self.Nk)


# -- step builders --------------------------------------------------------------------------------------


def _load(text: str, tensor: str, per: int, total: int, execs: int, smem: bool = True) -> Step:
    effects = [Effect("gmem_read", tensor, per, total)]
    if smem:
        effects.append(Effect("smem_write", tensor, per, total))
    return Step(text, "gmem->smem" if smem else "gmem->rf", execs, effects)


def _store(text: str, tensor: str, per: int, total: int, execs: int, tma: bool = False) -> Step:
    effects = [Effect("gmem_write", tensor, per, total)]
    if tma:  # staged in shared memory for the TMA engine
        effects += [Effect("smem_write", tensor, per, total), Effect("smem_read", tensor, per, total)]
    return Step(text, "rf->gmem tma" if tma else "rf->gmem", execs, effects)


def _gemm(text: str, instr: str, dt: str, m: int, n: int, k: int, execs: int,
          a: tuple[str, int] | None, b: tuple[str, int] | None, scale: tuple[str, int] | None = None) -> Step:
    """a, b: (tensor in shared memory, bytes one execution reads of it) or None for a register operand;
    scale: likewise for an fp8 block scale read from shared memory."""
    effects = [Effect("flops", f"{instr}/{dt}", 2 * m * n * k, 2 * m * n * k * execs)]
    for operand in (a, b, scale):
        if operand:
            effects.append(Effect("smem_read", operand[0], operand[1], operand[1] * execs))
    return Step(text, "smem->rf" if a or b else "rf", execs, effects)


def _work(text: str, execs: int, exps: int, alu: int, alu_total: int | None = None,
          smem: tuple[str, int, int] | None = None) -> Step:
    """Non-matmul work: exps and ALU FLOPs per execution (alu_total when masking adds to some);
    smem: (key, bytes written, bytes read) per execution for what it exchanges through shared memory."""
    effects = [Effect("exps", "", exps, exps * execs),
               Effect("alu_flops", "", alu, alu * execs if alu_total is None else alu_total)]
    path = "rf"
    if smem:
        key, wr, rd = smem
        effects += [Effect("smem_write", key, wr, wr * execs), Effect("smem_read", key, rd, rd * execs)]
        path = "rf<->smem"
    return Step(text, path, execs, effects)


def _when(condition: str, step: Step) -> Step:
    step.when = condition
    return step


def _merged(steps: list[Step]) -> list[Step]:
    """Several steps shown as one line (the first one's text), e.g. two scale loads."""
    if not steps:
        return []
    return [Step(steps[0].text, steps[0].path, steps[0].execs, [e for s in steps for e in s.effects])]


def _bh_loop(x: _Dims, body: list, heads: int | None = None) -> Loop:
    h = x.H if heads is None else heads
    return Loop(f"(b, h) in {x.B} x {h}", x.B * h, x.B * h, body, grid=True)


# -- the schedules --------------------------------------------------------------------------------------


def _standard(x: _Dims) -> list[KernelNest]:
    BH, Nq, Nk, d, e, eg, w, bm, bn = x.BH, x.Nq, x.Nk, x.d, x.e, x.eg, x.w, x.bm, x.bn
    tq, tk = x.Tr, x.Tc
    kd, kn = _cdiv(d, K_CHUNK), _cdiv(Nk, K_CHUNK)
    dn = min(d, bn)  # O = P V output tiles are bm x dn
    td = _cdiv(d, dn)
    rq, rk, cd = min(bm, Nq), min(bn, Nk), min(K_CHUNK, d)

    n = BH * tq * tk * kd
    qk = KernelNest("gemm_qk", BH * tq * tk, 32 * w, [_bh_loop(x, [
        Loop(f"i in 0..{tq}  q-block", tq, BH * tq, [
            Loop(f"j in 0..{tk}  k-block", tk, BH * tq * tk, [
                Loop(f"kc in 0..{kd}  {K_CHUNK}-wide slice of d", kd, n, [
                    _load("load Q[i, kc]", "Q", rq * cd * e, BH * tk * Nq * d * e, n),
                    _load("load K[j, kc]", "K", rk * cd * e, BH * tq * Nk * d * e, n),
                    _gemm("S += Q K^T  mma_sync, split rows", "mma_sync", x.dt, bm, bn, K_CHUNK, n,
                          ("Q", bm * K_CHUNK * eg), ("K", w * K_CHUNK * bn * eg)),
                ]),
                _store("store S[i, j]", "S", rq * rk * e, BH * Nq * Nk * e, BH * tq * tk),
            ]),
        ], grid=True),
    ])])

    tr = _cdiv(Nq, SOFTMAX_ROWS)
    n = BH * tr
    r = min(SOFTMAX_ROWS, Nq)
    softmax = KernelNest("softmax", n, 32 * SOFTMAX_ROWS, [_bh_loop(x, [
        Loop(f"r in 0..{tr}  block of {SOFTMAX_ROWS} rows", tr, n, [
            _load("load S[r, :]  pass 1: running max, sum", "S", r * Nk * e, BH * Nq * Nk * e, n, smem=False),
            _load("load S[r, :]  pass 2", "S", r * Nk * e, BH * Nq * Nk * e, n, smem=False),
            Step("P = softmax(scale S)  (max, exp, sum; exp again)", "rf", n, [
                Effect("exps", "", 2 * r * Nk, 2 * BH * Nq * Nk),
                Effect("alu_flops", "", 5 * r * Nk, 5 * BH * Nq * Nk)]),
            _store("store P[r, :]", "P", r * Nk * e, BH * Nq * Nk * e, n),
        ], grid=True),
    ])])

    n = BH * tq * td * kn
    pv = KernelNest("gemm_pv", BH * tq * td, 32 * w, [_bh_loop(x, [
        Loop(f"i in 0..{tq}  q-block", tq, BH * tq, [
            Loop(f"c in 0..{td}  {dn}-wide slice of d", td, BH * tq * td, [
                Loop(f"kc in 0..{kn}  {K_CHUNK}-key slice", kn, n, [
                    _load("load P[i, kc]", "P", rq * min(K_CHUNK, Nk) * e, BH * td * Nq * Nk * e, n),
                    _load("load V[kc, c]", "V", min(K_CHUNK, Nk) * dn * e, BH * tq * Nk * d * e, n),
                    _gemm("O += P V  mma_sync, split rows", "mma_sync", x.dt, bm, dn, K_CHUNK, n,
                          ("P", bm * K_CHUNK * eg), ("V", w * K_CHUNK * dn * eg)),
                ]),
                _store("store O[i, c]", "O", rq * dn * e, BH * Nq * d * e, BH * tq * td),
            ], grid=True),
        ], grid=True),
    ])])
    return [qk, softmax, pv]


def _v1(x: _Dims) -> list[KernelNest]:
    BH, Nk, d, e, eo, eg, w, br, bc = x.BH, x.Nk, x.d, x.e, x.eo, x.eg, x.w, x.bm, x.bn
    tr, tc = x.Tr, x.Tc
    n = [x.visible(i) for i in range(tr)]
    pairs = sum(n)  # (j, i) steps one thread block runs
    q_rows = sum(n[i] * x.rows(i) for i in range(tr))  # Q_i is reloaded at every visited j
    mid = sum(max(0, n[i] - 1) for i in range(tr))  # steps that are neither a row block's first nor last
    mid_rows = sum(max(0, n[i] - 1) * x.rows(i) for i in range(tr))
    seen = [i for i in range(tr) if n[i]]
    unseen = [i for i in range(tr) if not n[i]]
    masked = sum(x.masked(i * br, n[i]) for i in range(tr))
    P = BH * pairs
    rq, rk = min(br, x.Nq), min(bc, Nk)

    inner = [
        _load("load Q_i", "Q", rq * d * e, BH * q_rows * d * e, P),
    ]
    if mid:
        inner += [
            _when("j > 0", _load("load O_i fp32 partial", "Oacc", rq * d * F32, BH * mid_rows * d * F32, BH * mid,
                                 smem=False)),
            _when("j > 0", _load("load m_i", "M", rq * F32, BH * mid_rows * F32, BH * mid, smem=False)),
            _when("j > 0", _load("load l_i", "L", rq * F32, BH * mid_rows * F32, BH * mid, smem=False)),
        ]
    # one warp alone keeps its row statistics in registers
    stats = (SOFTMAX_STAT_COUNT * w * br * F32, SOFTMAX_STAT_COUNT * w * w * br * F32) if w > 1 else (0, 0)
    inner += [
        _gemm("S = Q_i K_j^T  mma_sync, split keys", "mma_sync", x.dt, br, bc, d, P,
              ("Q", w * br * d * eg), ("K", bc * d * eg)),
        _work("local softmax (stats across warps)", P, br * bc,
              4 * br * bc + 2 * br, (4 * br * bc + 2 * br) * P + MASK_OPS_PER_ELEMENT * BH * masked * br * bc,
              (SOFTMAX_STATS, *stats)),
        _gemm("PV = P V_j  split keys", "mma_sync", x.dt, br, d, bc, P, None, ("V", bc * d * eg)),
        _work(f"sum the {w} warps' partial PV", P, 0, 0, smem=(WARP_REDUCE, w * br * d * F32, w * br * d * F32)),
        _work("merge PV, m~, l~ into O_i, m_i, l_i", P, 2 * br, 4 * br * d + 6 * br),
    ]
    if mid:
        inner += [
            _when("j < last", _store("store O_i fp32 partial", "Oacc", rq * d * F32, BH * mid_rows * d * F32,
                                     BH * mid)),
            _when("j < last", _store("store m_i", "M", rq * F32, BH * mid_rows * F32, BH * mid)),
            _when("j < last", _store("store l_i", "L", rq * F32, BH * mid_rows * F32, BH * mid)),
        ]
    inner.append(_when("j = last", _store("store O_i", "O", rq * d * eo, BH * sum(x.rows(i) for i in seen) * d * eo,
                                          BH * len(seen))))
    note = "causal: skips masked blocks" if x.p.causal else ""
    sp = min(x.t.splits, tr)  # thread blocks per (b, h); each streams all of K and V
    q_loop = f"i in 0..{tr}  q-block" if sp == 1 else f"i in split..{tr} step {sp}  q-block"
    body = [
        Loop(f"j in 0..{tc}  kv-block", tc, BH * sp * tc, [
            _load("load K_j", "K", rk * d * e, BH * sp * Nk * d * e, BH * sp * tc),
            _load("load V_j", "V", rk * d * e, BH * sp * Nk * d * e, BH * sp * tc),
            Loop(q_loop, _cdiv(tr, sp), P, inner, note=note),
        ]),
    ]
    if sp > 1:
        body = [Loop(f"split in 0..{sp}", sp, BH * sp, body, grid=True)]
    if unseen:
        body.append(Loop(f"i in 0..{len(unseen)}  q-blocks that see no key", len(unseen), BH * len(unseen), [
            _store("store O_i = 0", "O", rq * d * eo, BH * sum(x.rows(i) for i in unseen) * d * eo,
                   BH * len(unseen))]))
    return [KernelNest("flash_fwd_v1", BH * sp, 32 * w, [_bh_loop(x, body)])]


def _v2(x: _Dims) -> list[KernelNest]:
    BH, Nq, d, e, eo, eg, w, bm, bn = x.BH, x.Nq, x.d, x.e, x.eo, x.eg, x.w, x.bm, x.bn
    tr = x.Tr
    n = [x.visible(i) for i in range(tr)]
    P = BH * sum(n)
    kv = BH * sum(x.kv_rows(k) for k in n) * d * e
    masked = BH * sum(x.masked(i * bm, n[i]) for i in range(tr))
    rq, rk = min(bm, Nq), min(bn, x.Nk)
    soft = 4 * bm * bn + bm * (2 + d)
    body = [
        _load("load Q_i", "Q", rq * d * e, BH * Nq * d * e, BH * tr),
        Loop(f"j in 0..{max(n)}  kv-block", max(n), P, [
            _load("load K_j", "K", rk * d * e, kv, P),
            _load("load V_j", "V", rk * d * e, kv, P),
            _gemm("S = Q_i K_j^T  mma_sync, split rows", "mma_sync", x.dt, bm, bn, d, P,
                  ("Q", bm * d * eg), ("K", w * bn * d * eg)),
            _work("online softmax, O *= e^(m_old - m)", P, bm * bn + bm, soft,
                  soft * P + MASK_OPS_PER_ELEMENT * masked * bm * bn),
            _gemm("O += P V_j", "mma_sync", x.dt, bm, d, bn, P, None, ("V", w * bn * d * eg)),
        ], note="causal: to the diagonal" if x.p.causal else ""),
        _work("O /= l, LSE = m + log l", BH * tr, 2 * bm, bm * d + bm),
        _store("store O_i", "O", rq * d * eo, BH * Nq * d * eo, BH * tr),
        _store("store LSE_i", "LSE", rq * F32, BH * Nq * F32, BH * tr),
    ]
    return [KernelNest("flash_fwd_v2", BH * tr, 32 * w, [_bh_loop(x, [
        Loop(f"i in 0..{tr}  q-block", tr, BH * tr, body, grid=True)])])]


def _v3(x: _Dims, fp8: bool, hadamard: bool) -> list[KernelNest]:
    BH, Nq, d, e, eo, eg, bm, bn = x.BH, x.Nq, x.d, x.e, x.eo, x.eg, x.bm, x.bn
    tr, wg = x.Tr, WG_ROWS
    q, k, v = ("Qq", "Kq", "Vq") if fp8 else ("Q", "K", "V")
    n = [x.visible(i) for i in range(tr)]
    cons = [min(bm // wg, _cdiv(Nq - i * bm, wg)) for i in range(tr)]  # warpgroups with rows in block i
    C = BH * sum(cons)
    P = BH * sum(n)
    CP = BH * sum(c * m for c, m in zip(cons, n, strict=True))  # (warpgroup, kv block) steps
    kv = BH * sum(x.kv_rows(m) for m in n) * d * e
    masked = BH * sum(x.masked(i * bm + c * wg, n[i]) for i in range(tr) for c in range(cons[i]))
    rescales = BH * sum(c * max(0, m - 1) for c, m in zip(cons, n, strict=True))
    rk = min(bn, x.Nk)
    soft = 4 * wg * bn + wg * (2 + d)

    scales = [_load("load Kscale_j, Vscale_j", "Kscale", F32, P * F32, P),
              _load("", "Vscale", F32, P * F32, P)] if fp8 else []
    producer = [
        _load("load Q_i (TMA, 64 rows per consumer)", q, min(bm, Nq) * d * e, BH * Nq * d * e, BH * tr),
        Loop(f"j in 0..{max(n)}  kv-block (ring of {x.t.stages} slots)", max(n), P, [
            _load("load K_j (TMA)", k, rk * d * e, kv, P),
            _load("load V_j (TMA)", v, rk * d * e, kv, P),
            *_merged(scales),
        ]),
    ]
    kv_loop = [
        _gemm("S = Q_c K_j^T  wgmma", "wgmma", x.dt, wg, bn, d, CP, (q, wg * d * eg), (k, bn * d * eg),
              ("Kscale", F32) if fp8 else None),
        _work("softmax (overlaps the previous PV)", CP, wg * bn + wg, soft,
              soft * CP + MASK_OPS_PER_ELEMENT * masked * wg * bn),
        _gemm("O += P V_j  wgmma", "wgmma", x.dt, wg, d, bn, CP, None, (v, bn * d * eg),
              ("Vscale", F32) if fp8 else None),
    ]
    if rescales:
        kv_loop.append(_when("j > 0", _work("O *= e^(m_old - m), deferred", rescales, 0, wg * d)))
    consumer = [
        *([_load("load Qscale_i", "Qscale", F32, C * F32, C, smem=False)] if fp8 else []),
        Loop(f"j in 0..{max(n)}  kv-block", max(n), CP, kv_loop,
             note="causal: to the diagonal" if x.p.causal else ""),
        _work("O /= l, LSE = m + log l", C, 2 * wg, wg * d + wg),
        _store("store O_c (TMA)", "O", min(wg, Nq) * d * eo, BH * Nq * d * eo, C, tma=True),
        _store("store LSE_c", "LSE", min(wg, Nq) * F32, BH * Nq * F32, C),
    ]
    body = [
        Loop("producer warpgroup (1)", 1, BH * tr, producer),
        Loop(f"c in 0..{bm // wg}  consumer warpgroup (in parallel)", bm // wg, C, consumer),
    ]
    name = "flash_fwd_v3_fp8" if fp8 else "flash_fwd_v3"
    nest = KernelNest(name, BH * tr, 32 * x.w, [_bh_loop(x, [
        Loop(f"i in 0..{tr}  q-block (work tile)", tr, BH * tr, body, grid=True)])], persistent=True)
    if not fp8:
        return [nest]
    return [_quantize(x, hadamard), nest]


def _quantize(x: _Dims, hadamard: bool) -> KernelNest:
    """v3-fp8's first pass: every Q block (block_m rows) and K/V block (block_n rows) to e4m3 and a scale."""
    B, Nq, Nk, d = x.B, x.Nq, x.Nk, x.d
    had = x.d.bit_length() - 1 if hadamard else 0  # log2(d) butterfly stages
    parts, ctas = [], 0
    for name, heads, n_rows, block in (("Q", x.H, Nq, x.bm), ("K", x.Hkv, Nk, x.bn), ("V", x.Hkv, Nk, x.bn)):
        blocks = _cdiv(n_rows, block)
        h = had if name in "QK" else 0
        m = B * heads * blocks
        r = min(block, n_rows)
        ctas += m
        text = f"quantise {name}" + (" diag(+-1) H / sqrt(d)" if h else "") + " to e4m3"
        parts.append(_bh_loop(x, [Loop(f"blk in 0..{blocks}  {name} block", blocks, m, [
            _load(f"load {name} (bf16)", name, r * d * IN_BYTES, B * heads * n_rows * d * IN_BYTES, m, smem=False),
            Step(text, "rf", m, [Effect("exps", "", 0, 0),
                                 Effect("alu_flops", "", (3 + h) * r * d, (3 + h) * B * heads * n_rows * d)]),
            _store(f"store {name}q (e4m3)", name + "q", r * d, B * heads * n_rows * d, m),
            _store(f"store {name}scale", name + "scale", F32, m * F32, m),
        ], grid=True)], heads))
    return KernelNest("quantize_fp8", ctas, 128, parts)


def loop_nest(algo: str, p: Problem, t: Tiling, hadamard: bool = True) -> list[KernelNest]:
    """The schedule of `algo` for this problem and tiling as one loop nest per kernel."""
    check_algo(algo)
    x = _Dims(p, t)
    if algo == "standard":
        return _standard(x)
    if algo == "v1":
        return _v1(x)
    if algo == "v2":
        return _v2(x)
    return _v3(x, algo == "v3-fp8", hadamard)


def walk(body: list):
    """Every step of a nest body, depth first."""
    for node in body:
        if isinstance(node, Loop):
            yield from walk(node.body)
        else:
            yield node


def fold(algo: str, nests: list[KernelNest]) -> IOCounts:
    """IOCounts from the nests' exact totals."""
    kernels = []
    for nest in nests:
        io = KernelIO(nest.name, nest.ctas)
        for step in walk(nest.body):
            for ef in step.effects:
                if ef.kind in ("exps", "alu_flops"):
                    setattr(io, ef.kind, getattr(io, ef.kind) + ef.total)
                else:
                    getattr(io, ef.kind)[ef.key] += ef.total
        for name in ("gmem_read", "gmem_write", "smem_read", "smem_write", "flops"):
            setattr(io, name, Counter({k: v for k, v in getattr(io, name).items() if v}))
        kernels.append(io)
    return IOCounts(algo, kernels)


def closed_form(algo: str, p: Problem, t: Tiling, hadamard: bool = True) -> IOCounts:
    """Every count of count_io(build(algo, p, t)), from formulas instead of walking the ops."""
    return fold(algo, loop_nest(algo, p, t, hadamard))
