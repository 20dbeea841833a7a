"""The counting interpreter: bytes each level moves and work each unit does, with no numeric work.

It walks the same programs as the numeric interpreter. Counts do not depend on how roles interleave, so each
role's program simply runs to its end (barriers are not waited on). Thread blocks whose programs are equal up
to (batch, head) (Kernel.classes) are walked once and multiplied, so a grid of millions of tiles counts in
about a second.

What is counted, in bytes:
  gmem_read / gmem_write  every Load / Store, by global tensor (requests to global memory; how many reach
                          HBM rather than L2 is the timing simulator's question);
  gmem_atomic             every AtomicAdd (the backward's fp32 dQ accumulation): bytes sent to the L2 to be
                          added there (a reduce-add through TMA is staged in shared memory first);
  smem_write              Loads into shared memory (by tensor), tiles a role stages for another (StoreShared,
                          by its label), partials a WarpReduce stages, the row
                          statistics a cross-warp softmax exchanges, and O staged for a TMA store;
  smem_read               GEMM operands read from shared memory, by the tensor loaded into the buffer.
                          mma.sync warps each issue their own MMAs, so split 'm' (warps own rows) reads A
                          once in all but B once per warp; split 'n' the other way round; a grid 'RxC' reads A C times
                          and B R times; split 'k' reads each
                          once. A wgmma is issued by one warpgroup and reads each operand once. Plus the
                          WarpReduce / softmax-exchange / TMA-store read backs, and fp8 block scales a
                          GEMM reads from shared memory.
And the work: tensor-core FLOPs by 'instr/dtype', exponentials, and other ALU FLOPs, as the ops define them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .ir import (
    FP32_BYTES,
    SMEM,
    AtomicAdd,
    Gemm,
    Load,
    OnlineSoftmax,
    Schedule,
    Store,
    StoreShared,
    WarpReduce,
)

# Bytes of one GEMM operand element by instruction dtype (fp32 problems run as tf32 on 4-byte data).
OPERAND_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
# smem keys of traffic that is not a tile of a global tensor.
WARP_REDUCE, SOFTMAX_STATS = "warp_reduce", "softmax_stats"
# Row statistics a cross-warp online softmax exchanges: the max, then the sum.
SOFTMAX_STAT_COUNT = 2


@dataclass
class KernelIO:
    """Counts of one launch. ctas: thread blocks (or work tiles of a persistent kernel)."""

    name: str
    ctas: int
    gmem_read: Counter = field(default_factory=Counter)
    gmem_write: Counter = field(default_factory=Counter)
    gmem_atomic: Counter = field(default_factory=Counter)
    smem_read: Counter = field(default_factory=Counter)
    smem_write: Counter = field(default_factory=Counter)
    flops: Counter = field(default_factory=Counter)
    exps: int = 0
    alu_flops: int = 0

    @property
    def gmem_bytes(self) -> int:
        return sum(self.gmem_read.values()) + sum(self.gmem_write.values()) + sum(self.gmem_atomic.values())

    @property
    def smem_bytes(self) -> int:
        return sum(self.smem_read.values()) + sum(self.smem_write.values())

    def as_dict(self) -> dict:
        atomic = {"gmem_atomic": _plain(self.gmem_atomic)} if self.gmem_atomic else {}
        return {
            "name": self.name,
            "ctas": self.ctas,
            "gmem_read": _plain(self.gmem_read),
            "gmem_write": _plain(self.gmem_write),
            **atomic,
            "smem_read": _plain(self.smem_read),
            "smem_write": _plain(self.smem_write),
            "flops": _plain(self.flops),
            "exps": self.exps,
            "alu_flops": self.alu_flops,
            "gmem_bytes": self.gmem_bytes,
            "smem_bytes": self.smem_bytes,
        }


@dataclass
class IOCounts:
    """Counts of a whole schedule: one KernelIO per launch, and their sums."""

    algo: str
    kernels: list[KernelIO]

    def _sum(self, name: str) -> Counter:
        total = Counter()
        for k in self.kernels:
            total.update(getattr(k, name))
        return total

    @property
    def gmem_read(self) -> Counter:
        return self._sum("gmem_read")

    @property
    def gmem_write(self) -> Counter:
        return self._sum("gmem_write")

    @property
    def gmem_atomic(self) -> Counter:
        return self._sum("gmem_atomic")

    @property
    def smem_read(self) -> Counter:
        return self._sum("smem_read")

    @property
    def smem_write(self) -> Counter:
        return self._sum("smem_write")

    @property
    def flops(self) -> Counter:
        return self._sum("flops")

    @property
    def exps(self) -> int:
        return sum(k.exps for k in self.kernels)

    @property
    def alu_flops(self) -> int:
        return sum(k.alu_flops for k in self.kernels)

    @property
    def gmem_bytes(self) -> int:
        """Bytes read from and written to global memory: the HBM-level traffic of Theorem 2."""
        return sum(k.gmem_bytes for k in self.kernels)

    @property
    def smem_bytes(self) -> int:
        return sum(k.smem_bytes for k in self.kernels)

    def as_dict(self) -> dict:
        atomic = self.gmem_atomic
        return {
            "algo": self.algo,
            "gmem_bytes": self.gmem_bytes,
            "smem_bytes": self.smem_bytes,
            "gmem_read": _plain(self.gmem_read),
            "gmem_write": _plain(self.gmem_write),
            **({"gmem_atomic": _plain(atomic)} if atomic else {}),
            "smem_read": _plain(self.smem_read),
            "smem_write": _plain(self.smem_write),
            "flops": _plain(self.flops),
            "exps": self.exps,
            "alu_flops": self.alu_flops,
            "kernels": [k.as_dict() for k in self.kernels],
        }


def _plain(c: Counter) -> dict[str, int]:
    """A JSON-able dict without zero entries, sorted by key so equal counts print equally."""
    return {key: int(c[key]) for key in sorted(c) if c[key]}


def _count_cta(roles, cta, k: int, io: KernelIO) -> None:
    """Add k times the counts of one thread block (every role's program run to its end) to io."""
    gr, gw, sr, sw, fl = io.gmem_read, io.gmem_write, io.smem_read, io.smem_write, io.flops
    exps = alu = 0
    smem_tensor: dict[str, tuple] = {}  # shared-memory buffer -> (global tensor loaded into it, bytes)
    # operand reads of buffers no role has filled yet (another role stages them: roles run one after another
    # here), named once every role has run
    unnamed: Counter = Counter()
    for role in roles:
        for op in role.program(cta):
            kind = type(op)
            if kind is Load:
                n = op.src.nbytes * k
                gr[op.src.tensor] += n
                if op.level == SMEM:
                    sw[op.src.tensor] += n
                    smem_tensor[op.dst] = op.src.tensor, op.src.nbytes
            elif kind is Store:
                n = op.dst.nbytes * k
                gw[op.dst.tensor] += n
                if op.level == SMEM:
                    sr[op.dst.tensor] += n
                elif op.via == "tma":  # a TMA store reads its source from shared memory: stage it there
                    sw[op.dst.tensor] += n
                    sr[op.dst.tensor] += n
            elif kind is Gemm:
                fl[f"{op.instr}/{op.dtype}"] += op.flops * k
                a_reads, b_reads = operand_reads(op)
                e = OPERAND_BYTES[op.dtype] * k
                if op.a_level == SMEM:
                    if op.a in smem_tensor:
                        sr[smem_tensor[op.a][0]] += a_reads * op.m * op.k * e
                    else:
                        unnamed[op.a] += a_reads * op.m * op.k * e
                if op.b_level == SMEM:
                    if op.b in smem_tensor:
                        sr[smem_tensor[op.b][0]] += b_reads * op.k * op.n * e
                    else:
                        unnamed[op.b] += b_reads * op.k * op.n * e
                for scale in (op.a_scale, op.b_scale):
                    if scale in smem_tensor:  # fp8 block scales that travelled with their tiles
                        tensor, nbytes = smem_tensor[scale]
                        sr[tensor] += nbytes * k
            elif kind is StoreShared:
                sw[op.label] += op.nbytes * k
                smem_tensor[op.dst] = op.label, op.nbytes
            elif kind is AtomicAdd:
                n = op.dst.nbytes * k
                io.gmem_atomic[op.dst.tensor] += n
                if op.via == "tma":  # staged in shared memory for the TMA engine
                    sw[op.dst.tensor] += n
                    sr[op.dst.tensor] += n
            elif kind is WarpReduce:
                half = op.smem_bytes // 2 * k
                sw[WARP_REDUCE] += half
                sr[WARP_REDUCE] += half
            else:
                if kind is OnlineSoftmax and op.cross_warp > 1:
                    w, rows = op.cross_warp, op.rows
                    sw[SOFTMAX_STATS] += SOFTMAX_STAT_COUNT * softmax_exchange_writes(w, rows) * k
                    sr[SOFTMAX_STATS] += SOFTMAX_STAT_COUNT * softmax_exchange_reads(w, rows) * k
                exps += getattr(op, "exps", 0)
                alu += getattr(op, "alu_flops", 0)
    for buffer, n in unnamed.items():
        sr[smem_tensor.get(buffer, (buffer,))[0]] += n
    io.ctas += k
    io.exps += exps * k
    io.alu_flops += alu * k


def operand_reads(op: Gemm) -> tuple[int, int]:
    """How many times the issuing warps read all of A and all of B (see the module docstring)."""
    if op.instr == "wgmma" or op.split == "k":
        return 1, 1
    if "x" in op.split:  # a grid of warps: a row of warps shares A's rows, a column B's columns
        rows, cols = map(int, op.split.split("x"))
        return cols, rows
    if op.split == "m":
        return 1, op.warps
    return op.warps, 1


def softmax_exchange_writes(warps: int, rows: int) -> int:
    """One statistic of a cross-warp softmax: each warp writes its per-row partial..."""
    return warps * rows * FP32_BYTES


def softmax_exchange_reads(warps: int, rows: int) -> int:
    """...and every warp reads all partials back, since each needs the combined statistic of every row."""
    return warps * warps * rows * FP32_BYTES


def count_io(schedule: Schedule) -> IOCounts:
    """Counts of a schedule: one representative thread block per class, multiplied by the class size."""
    kernels = []
    for kernel in schedule.kernels:
        total = KernelIO(kernel.name, 0)
        if kernel.classes is None:
            groups = Counter(kernel.ctas)
            reps = {c: c for c in groups}
        else:
            keys = list(map(kernel.classes, kernel.ctas))
            groups = Counter(keys)
            reps = dict(zip(keys, kernel.ctas, strict=True))  # any member stands for its class
        for key, size in groups.items():
            _count_cta(kernel.roles, reps[key], size, total)
        kernels.append(total)
    return IOCounts(schedule.algo, kernels)
