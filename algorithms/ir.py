"""The tile-operation vocabulary every schedule is written in.

A schedule is a list of kernels; a kernel is a grid of thread blocks (CTAs), each running one program per
warp role (V2: one role of all warps; V3: a producer and consumer warpgroups). A program is a generator of
the ops below. Three interpreters read the same programs:

- numeric (algorithms/numeric.py): executes the ops on tensors and must reproduce attention;
- counting (algorithms/counting.py): sums the bytes each op moves between memory levels;
- timing (simulator/): turns each op into requests to hardware resources and lets contention decide time.

So ops carry what each interpreter needs (shapes, dtypes, memory levels, instruction class, issuing warps)
and never a time. Buffers are named; a name's memory level is fixed by the op that first writes it.

Synchronisation is by counting barriers: Arrive adds to a counter, Wait blocks until the counter reaches a
target. mbarriers (TMA completion, full/empty ring slots) and named barriers (ping-pong) are both this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

# Memory levels.
GMEM, SMEM, RMEM = "gmem", "smem", "rmem"

# Element sizes of the global tensors a schedule may name, beside the input dtype.
FP32_BYTES = 4


@dataclass(frozen=True, slots=True)
class GTile:
    """A rectangle of a global tensor: rows [row, row+rows) and columns [col, col+cols) of (batch, head)."""

    tensor: str  # Q K V O S P LSE M L (the V1 running stats) or a workspace name
    batch: int
    head: int
    row: int
    rows: int
    col: int
    cols: int
    elem_bytes: int

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * self.elem_bytes


@dataclass(frozen=True, slots=True)
class Load:
    """Global -> shared memory (or registers). via: 'ld' (synchronous), 'cp.async' or 'tma'. An async
    load arrives on `barrier` when its bytes have landed."""

    src: GTile
    dst: str
    level: str = SMEM
    via: str = "ld"
    barrier: str | None = None
    # Place the tile at this row of dst (None: dst is the tile). Packed GQA tiles gather several heads' rows
    # into one buffer, and a combine gathers every split's partial; the loads stay separate requests.
    dst_row: int | None = None
    # Warp instructions each of `warps` issuing warps spends on this copy: the copy instructions and the
    # address arithmetic before them, counted in the kernel's SASS (0: the profile's per-copy issue cost).
    issue: float = 0.0
    warps: int = 1
    # Plain loads into parts of one buffer (dst_row set) kept in flight together: a load waits for the one
    # `in_flight` parts before it to land (1: each waits for the previous, its register reused at once).
    in_flight: int = 1

    @property
    def nbytes(self) -> int:
        return self.src.nbytes


@dataclass(frozen=True, slots=True)
class Store:
    """Registers or shared memory -> global memory, converted to the tile's element type."""

    src: str
    dst: GTile
    level: str = RMEM  # where src lives
    via: str = "st"  # 'st' or 'tma'
    src_row: int = 0  # the first row of src it writes (a packed GQA tile stores each head's rows apart)
    # stores per thread that wait for one another: each thread's fragment stores reuse one data register, so
    # each waits about an L2 round trip for the one before it (the timing interpreter's floor); 0: none
    chained: int = 0
    # each thread stores its accumulator fragments itself (4 bytes, 16 per row per warp instruction): the
    # warp goes on once the SM's store path has taken them out of its registers, at the rate such stores get
    fragments: bool = False

    @property
    def nbytes(self) -> int:
        return self.dst.nbytes


@dataclass(frozen=True, slots=True)
class Gemm:
    """dst (m x n, fp32) = a (m x k) @ b (k x n), or a @ b^T when trans_b (b stored n x k).

    instr: 'mma_sync' or 'wgmma'; dtype: operand type ('fp16', 'bf16', 'fp8', 'fp32' as tf32).
    split: how the issuing role's warps divide the product: 'm' (rows: split-Q), 'n' (columns),
    'k' (split-K: each warp a slice of k; dst then holds `warps` partial sums, see WarpReduce), or a grid
    'RxC' (R warps along the rows times C along the columns, as FA2's backward lays its warps out).
    async_token: issue without waiting (wgmma); GemmWait(token) waits for it."""

    dst: str
    a: str
    b: str
    m: int
    n: int
    k: int
    a_level: str
    b_level: str
    instr: str
    dtype: str
    warps: int
    trans_b: bool = False
    accumulate: bool = False
    trans_a: bool = False  # a stored k x m (the backward's P^T dO, dS^T Q)
    split: str = "m"
    a_scale: str | None = None  # fp8: per-row-block dequantisation scales (buffer names)
    b_scale: str | None = None
    async_token: str | None = None

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


@dataclass(frozen=True, slots=True)
class GemmWait:
    token: str


CAUSAL_ALIGNS = ("bottom-right", "top-left")


def causal_offset(align: str, seqlen_q: int, seqlen_k: int) -> int:
    """Query row r sees keys 0..r + offset. bottom-right (the default, FlashAttention >= 2.1): the last query
    row sees every key, as decode needs; top-left (PyTorch SDPA's is_causal): row r sees keys 0..r."""
    return seqlen_k - seqlen_q if align == "bottom-right" else 0


@dataclass(frozen=True, slots=True)
class Mask:
    """Scale S and mask what a position may not see: the causal upper triangle (aligned as `align` says
    when seqlen_q != seqlen_k, see causal_offset) and key columns past the sequence end."""

    row0: int
    col0: int
    seqlen_q: int
    seqlen_k: int
    causal: bool
    align: str = "bottom-right"
    # A packed GQA tile stacks `packed` query rows per head: tile row r is query (row0 + r) % packed.
    packed: int = 0

    @property
    def shift(self) -> int:
        return causal_offset(self.align, self.seqlen_q, self.seqlen_k)

    def first_query(self, rows: int) -> int:
        """The smallest query index among the tile's rows (the one that sees the fewest keys)."""
        if not self.packed:
            return self.row0
        return 0 if rows >= self.packed else min((self.row0 + r) % self.packed for r in range(rows))

    def needed(self, rows: int, cols: int) -> bool:
        """Whether a rows x cols tile at (row0, col0) has any masked element."""
        if self.col0 + cols > self.seqlen_k:
            return True
        if not self.causal:
            return False
        return self.col0 + cols - 1 > self.first_query(rows) + self.shift


MASK_OPS_PER_ELEMENT = 3
# How a kernel's code computes exp2 of a score, and the instructions it adds to the softmax per exponential.
# "approx": exp2 of one FFMA (score * scale - max * scale) as MUFU.EX2 alone (ex2.approx.ftz: our kernels).
# "exp2f": PyTorch's FA2 build: the score scaled and the max subtracted apart (its UNFUSE_FMA switch: FMUL then
# FADD, no FFMA) and exp2f kept to the full range (no fast math): an FSETP tests the argument against -126
# (a subnormal result) and two predicated FMULs halve the argument and square the result around MUFU.EX2.
# Its SASS, per warp and K/V tile: experiments/results/h200/fa2-sass/.
EXP2_FORMS = ("approx", "exp2f")
EXP2F_EXTRA_PER_EXP = 3  # the range test and the two FMULs (the unfused product is already two ops here)
# How a kernel's epilogue writes O: "tma": staged in shared memory and written by a TMA store, which no warp
# waits for (FA3's epilogue); "fragments": each thread stores its accumulator fragments straight to global
# memory, 4 bytes per thread and 16 per row per instruction (our v3 kernel, kernels/v3_epilogue.cuh), and
# the warp reuses those registers for the next tile only once the stores have drained.
O_STORE_FORMS = ("tma", "fragments")
# How a warp-specialized kernel's consumer orders its GEMMs and softmax: "overlap": FA3's intra-warpgroup
# pipelining (S_j is issued with P_j-1 V_j-1 and the softmax of S_j runs while P_j-1 V_j-1 does; the ping-pong
# turn covers both GEMMs); "serial": cuDNN's Hopper kernel (its SASS, experiments/results/h200/session21/ and
# session52/): S_j issued and waited for at once, its row max (RowMax) taken, then its softmax and O's rescale
# within the ping-pong turn, then P_j V_j issued and waited for at once before S_j+1; the producer loads K_j then
# V_j; one Q buffer, refilled once the consumers have left the tile's K/V loop. Its code issues the softmax's
# rows interleaved (2.5-2.8 cycles an instruction under the turn, against 3.9-4.4 for our v3's dependent
# stream), so the instruction-issue model times it (simulator/api.py, issue_model_for).
PIPELINE_FORMS = ("overlap", "serial")


@dataclass(frozen=True, slots=True)
class OnlineSoftmax:
    """FlashAttention's online softmax on one S tile (rows x cols, fp32, in registers).

    mode 'online': m <- max(m, rowmax(S)); P = exp(S - m); l <- l * e^(m_old - m) + rowsum(P);
               acc (rows x acc_cols) <- acc * e^(m_old - m). P is left unnormalised.
    mode 'local': local stats m~ = rowmax(S), P = exp(S - m~), l~ = rowsum(P) (Algorithm 1 lines 10-11);
               merging with the running m, l happens in RescaleMerge.
    cross_warp: row statistics are combined across this many warps through shared memory (split-K)."""

    s: str
    p: str
    m: str
    l: str
    rows: int
    cols: int
    scale: float
    mask: Mask | None
    p_dtype: str
    acc: str | None = None
    acc_cols: int = 0
    corr: str | None = None  # write the acc correction e^(m_old - m) here instead of rescaling acc now
    mode: str = "online"
    cross_warp: int = 1
    warps: int = 1
    exp2: str = "approx"  # the compiled form of the exponential (EXP2_FORMS)
    # the new running max, taken ahead by a RowMax into this register (which also masked S): the op then
    # computes only what follows the max ("online" mode, no mask of its own)
    max_in: str | None = None

    def __post_init__(self) -> None:
        if self.max_in is not None and (self.mode != "online" or self.mask is not None):
            raise ValueError("an online softmax after a RowMax takes no mask and runs in 'online' mode")

    @property
    def exps(self) -> int:
        return self.rows * self.cols + (self.rows if self.mode == "online" else 0)

    @property
    def alu_flops(self) -> int:
        # scale, max, subtract, sum per element; a masked tile adds a bound compare, a causal compare and a
        # select per element (2 ISETP + 1 FSEL in the SASS of our v2 kernel); rescale of l and acc per row;
        # exp2f's range test and scalings per exponential. After a RowMax, the max and mask are its.
        per_elem = (3 if self.max_in else 4) + (MASK_OPS_PER_ELEMENT if self.mask is not None else 0)
        return per_elem * self.rows * self.cols + self.rows * (2 + self.acc_cols) + self.exp2_ops

    @property
    def exp2_ops(self) -> int:
        """The ops the exp2f form adds (none for approx): independent per element, no row's chain waits on
        them, so the timing issues them apart from the dependent stream."""
        return EXP2F_EXTRA_PER_EXP * self.exps if self.exp2 == "exp2f" else 0


@dataclass(frozen=True, slots=True)
class RowMax:
    """The first part of an online softmax taken on its own: S's hidden keys set to -inf in place, then
    out <- max(m, rowmax(scale * S)) per row. cuDNN's Hopper kernel takes it before its ping-pong turn and the
    rest of the softmax (an OnlineSoftmax with max_in = out) within it (PIPELINE_FORMS "serial")."""

    s: str
    m: str
    out: str
    rows: int
    cols: int
    scale: float
    mask: Mask | None
    warps: int = 1

    @property
    def exps(self) -> int:
        return 0

    @property
    def alu_flops(self) -> int:
        # the max per element, with the mask's compares and select where the tile has one
        return (1 + (MASK_OPS_PER_ELEMENT if self.mask is not None else 0)) * self.rows * self.cols


@dataclass(frozen=True, slots=True)
class Rescale:
    """acc <- acc * corr row-wise: the deferred O correction of a pipelined online softmax (FA3)."""

    acc: str
    corr: str
    rows: int
    cols: int
    warps: int

    @property
    def exps(self) -> int:
        return 0

    @property
    def alu_flops(self) -> int:
        return self.rows * self.cols


@dataclass(frozen=True, slots=True)
class RescaleMerge:
    """V1's update of O_i (Algorithm 1 line 12-13): with the tile's local stats (m~, l~) and the running
    (m, l) read from global memory, O <- diag(l_new)^-1 (diag(l) e^(m - m_new) O + e^(m~ - m_new) PV)."""

    o: str
    pv: str
    m: str
    l: str
    m_tile: str
    l_tile: str
    rows: int
    cols: int
    warps: int

    @property
    def exps(self) -> int:
        return 2 * self.rows

    @property
    def alu_flops(self) -> int:
        return 4 * self.rows * self.cols + 6 * self.rows


@dataclass(frozen=True, slots=True)
class WarpReduce:
    """Sum `parts` partial tiles (rows x cols fp32) held by different warps through shared memory."""

    dst: str
    src: str
    rows: int
    cols: int
    parts: int
    warps: int

    @property
    def smem_bytes(self) -> int:
        # each warp writes its partial, the owners read all partials back
        return 2 * self.parts * self.rows * self.cols * FP32_BYTES


@dataclass(frozen=True, slots=True)
class Normalize:
    """acc <- acc / l row-wise; lse <- m + log(l) (V2/V3 epilogue). Rows with l = 0 (fully masked) give 0."""

    acc: str
    m: str
    l: str
    lse: str | None
    rows: int
    cols: int
    warps: int

    @property
    def exps(self) -> int:
        return 2 * self.rows  # reciprocal and log per row

    @property
    def alu_flops(self) -> int:
        return self.rows * self.cols + self.rows


@dataclass(frozen=True, slots=True)
class MergeSplits:
    """Flash-Decoding's combine: `splits` partial results of the same rows, each normalised over its own
    K/V range (O_s, fp32, stacked split-major in `o_parts`; LSE_s in `lse_parts`), merged exactly:
    LSE = log sum_s e^(LSE_s), O = sum_s e^(LSE_s - LSE) O_s. A split that saw no key (LSE_s = +inf, as
    Normalize leaves it) weighs nothing."""

    o_parts: str
    lse_parts: str
    o: str
    lse: str
    splits: int
    rows: int
    cols: int
    warps: int

    @property
    def exps(self) -> int:
        return self.splits * self.rows + self.rows  # e^(LSE_s - max) per split and row, and the log

    @property
    def alu_flops(self) -> int:
        # max, subtract and sum over the splits per row; a scale and add per split and element
        return 3 * self.splits * self.rows + 2 * self.splits * self.rows * self.cols


@dataclass(frozen=True, slots=True)
class RowSoftmax:
    """Standard attention's softmax kernel: a row block of S (rows x cols) -> P. passes = 2: a first pass keeps
    a running (max, sum), the second recomputes the exponentials to write P."""

    s: str
    p: str
    rows: int
    cols: int
    scale: float
    mask: Mask | None
    warps: int
    passes: int = 1

    @property
    def exps(self) -> int:
        return self.passes * self.rows * self.cols

    @property
    def alu_flops(self) -> int:
        return 5 * self.rows * self.cols


@dataclass(frozen=True, slots=True)
class Quantize:
    """fp8 pass: per-block scale delta = max|x| / 448 and x / delta rounded to e4m3, register tile -> dst.

    chunks: 0 for a tile in the tensor cores' fragment layout; else the SIMT layout of v3-fp8's pre-pass
    (kernels/fp8_prepass.cuh), where every thread works `chunks` chunks of 8 consecutive elements of a row
    (a padded block's too) and the Hadamard transform crosses lanes by shuffles; that code is issued through
    the instruction-issue model whatever the schedule's GEMMs. issue: the warp instructions each warp issues
    beyond what the lowering counts (address arithmetic, moves, branches, V's transposition), measured."""

    src: str
    dst: str
    scale: str
    rows: int
    cols: int
    warps: int
    hadamard_seed: int | None = None  # incoherent processing: x <- x diag(+-1) H / sqrt(d) first
    chunks: int = 0
    issue: float = 0.0

    @property
    def exps(self) -> int:
        return 0

    @property
    def alu_flops(self) -> int:
        # abs-max, divide, round per element; a fast Walsh-Hadamard transform adds cols*log2(cols).
        had = self.cols.bit_length() - 1 if self.hadamard_seed is not None else 0
        return (3 + had) * self.rows * self.cols


@dataclass(frozen=True, slots=True)
class Fill:
    """Initialise a register tile (accumulator zeros, running max -inf)."""

    dst: str
    rows: int
    cols: int
    value: float


@dataclass(frozen=True, slots=True)
class Arrive:
    barrier: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class Wait:
    """Block until `barrier` has received `target` arrivals in total."""

    barrier: str
    target: int


@dataclass(frozen=True, slots=True)
class SyncThreads:
    """__syncthreads among the role's warps (a single role in V1, V2 and standard)."""


@dataclass(frozen=True, slots=True)
class Code:
    """The role's warps go on to a stretch of the kernel's SASS: `nbytes` of code (the 128-byte lines they run,
    counted in the kernel's executed instructions), named so that the SM knows it again. A stretch not in the
    SM's instruction cache is fetched before its ops run; the block's warps share the fetch. `branches`: the
    taken branches a warp runs there (each redirects its fetch, kept code or not); `far` of them land beyond
    the next line (back, or over a line), whose target line is fetched anew. Only where a kernel's code is
    known: a schedule without Code ops runs as if its code were always there. `streamed`: a stretch the timing
    fetches only with the profile's fetch_model 1, where the fetch streams in while the warps run the stretch
    (the forward kernels', whose code issues slowly enough to hide most of it). `issue`: the warp
    instructions each of `warps` warps issues in the stretch that the lowering of its tile ops does not count
    (the compiler's bookkeeping: address arithmetic, moves, copies' issue, branches), which the timing's
    instruction-issue model (issue_model 1) puts on the SM's warp schedulers as the stretch begins. `alone`: a
    stretch whose bookkeeping has none of its tile ops' instructions to issue beside it (a prologue or an
    epilogue), so each warp issues it at the pace of its own dependencies (profile.bookkeeping_issue_cycles).
    `instructions`: what each warp runs of the stretch's lines, where known; a streamed stretch whose
    instructions issue faster than its lines come (code dense in instructions that wait on no unit, like a
    mask) runs at the pace of its fetch: its warps go on only once its last line has come (0: not known, the
    stretch's ops are taken to be slower than its fetch)."""

    name: str
    nbytes: int
    branches: float = 0.0
    far: float = 0.0
    streamed: bool = False
    issue: float = 0.0
    warps: int = 1
    alone: bool = False
    instructions: int = 0


@dataclass(frozen=True, slots=True)
class BlockSetup:
    """What a warp-specialised block's producer does before a tile's first copy, in dependent steps: on the
    block's first tile, initialise `mbarriers` barriers in shared memory and publish them (the fence and the
    block's barrier), then move registers between warpgroups (setmaxnreg, `realloc`); on every tile, take the
    tile's number from the grid's counter (`counter`: an atomic answered by the L2) and compute its coordinates:
    `param_reads` rounds of dependent reads of the kernel's parameters in the constant bank (`cold`: the first
    reads of the block, which miss the SM's constant cache) around the scheduler's divisions by runtime values
    (`tile_index`). A latency on the producer alone: no unit's rate, no bytes."""

    mbarriers: int = 0
    realloc: bool = False
    param_reads: int = 0
    cold: bool = False
    tile_index: bool = True
    counter: bool = False


# -- the backward pass ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AtomicAdd:
    """dst (a global fp32 tile) += src: a reduction done by the L2, not read back by the issuing block.
    via 'red' (red.global.add from registers, FA2's dQ) or 'tma' (a TMA reduce-add of a tile staged in
    shared memory, FA3's dQ). The bytes go to the L2, which reads, adds and writes its lines; HBM sees them
    only on a miss or an eviction."""

    src: str
    dst: GTile
    via: str = "red"
    # groups of reductions per thread that wait for one another (their address and data registers reused):
    # the issuing warps go on once the last group has left, each group about an L2 round trip after the one
    # before it (the timing interpreter); 0: fire and forget
    chained: int = 0

    @property
    def nbytes(self) -> int:
        return self.dst.nbytes


@dataclass(frozen=True, slots=True)
class StoreShared:
    """Registers -> a shared-memory buffer that other warp roles read (FA3's dS, the operand of the dQ GEMM
    another warpgroup issues), in the GEMM operand type. label: what the bytes are counted as."""

    src: str
    dst: str
    rows: int
    cols: int
    elem_bytes: int
    label: str

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * self.elem_bytes


@dataclass(frozen=True, slots=True)
class RowDot:
    """dst (rows x 1) = rowsum(a * b): the backward's D = rowsum(dO * O) (= rowsum(P * dP))."""

    dst: str
    a: str
    b: str
    rows: int
    cols: int
    warps: int

    @property
    def exps(self) -> int:
        return 0

    @property
    def alu_flops(self) -> int:
        return 2 * self.rows * self.cols


@dataclass(frozen=True, slots=True)
class LseExp:
    """P = exp(scale * S - LSE) row-wise, masked positions 0: the forward's probabilities recomputed from
    S and the saved logsumexp (no max or sum needed)."""

    s: str
    p: str
    lse: str
    rows: int
    cols: int
    scale: float
    mask: Mask | None
    warps: int
    exp2: str = "approx"  # the compiled form of the exponential (EXP2_FORMS): FA2's backward computes exp2f's

    @property
    def exps(self) -> int:
        return self.rows * self.cols

    @property
    def alu_flops(self) -> int:
        return (2 + (MASK_OPS_PER_ELEMENT if self.mask is not None else 0)) * self.rows * self.cols + self.exp2_ops

    @property
    def exp2_ops(self) -> int:
        """The ops the exp2f form adds (none for approx), off the dependent stream as in OnlineSoftmax."""
        return EXP2F_EXTRA_PER_EXP * self.exps if self.exp2 == "exp2f" else 0


@dataclass(frozen=True, slots=True)
class SoftmaxGrad:
    """dS = scale * P * (dP - D) row-wise: softmax's backward with the softmax scale folded in, so that
    dQ = dS K and dK = dS^T Q."""

    ds: str
    p: str
    dp: str
    d: str
    rows: int
    cols: int
    scale: float
    warps: int

    @property
    def exps(self) -> int:
        return 0

    @property
    def alu_flops(self) -> int:
        return 3 * self.rows * self.cols


Op = (
    Load | Store | Gemm | GemmWait | OnlineSoftmax | RowMax | Rescale | RescaleMerge | WarpReduce | Normalize
    | MergeSplits | RowSoftmax | Quantize | Fill | Arrive | Wait | SyncThreads | Code | BlockSetup | AtomicAdd
    | StoreShared | RowDot | LseExp | SoftmaxGrad
)


@dataclass(frozen=True)
class Role:
    """A group of warps running one program: `program(cta)` yields ops (`program(cta, state)` in a kernel
    with `carry`)."""

    name: str
    warps: int
    program: Callable[[tuple], Iterator[Op]]


@dataclass(frozen=True)
class Kernel:
    """One launch: the CTAs of its grid (in launch order) and the roles each CTA runs.

    persistent: the grid is one CTA per SM slot and `ctas` lists work tiles that those CTAs take in
    order (a static tile scheduler); otherwise each entry of `ctas` is its own thread block."""

    name: str
    ctas: list[tuple]
    roles: tuple[Role, ...]
    smem_bytes: int
    regs_per_thread: int
    persistent: bool = False
    # CTAs whose programs are identical up to (batch, head): used to count one and multiply.
    classes: Callable[[tuple], tuple] | None = None
    # Every CTA (work tile) does the same work, up to addresses: the simulator may skip periods of waves.
    uniform: bool = False
    # (batch, K/V head) a CTA works for; None: the CTA tuple starts (batch, query head, ...).
    kv_head_of: Callable[[tuple], tuple[int, int]] | None = None
    # A persistent grid whose blocks run on from tile to tile: each role starts its part of the next tile as
    # it ends its part of the last (the first role takes the tile), on the block's barriers, which keep
    # their counts. carry(state, cta) is the block's state after tile `cta` given its state before it (None
    # at the block's start); the roles' programs take (cta, state) and count their barrier targets and
    # buffer slots from that state. Without it, every work tile starts afresh once the last has ended.
    carry: Callable[[object, tuple], object] | None = None
    # With carry: the blocks take their tiles from a counter in global memory (an L2 atomic per tile);
    # otherwise each block works out its own tiles (block b: b, b + grid, ...), which costs no memory access.
    tile_counter: bool = True
    # A block's K/V steps where blocks differ in length (causal): what a head sample's dispatch replay
    # (simulator/replay.py) measures a block's work in; None: no replay.
    steps: Callable[[tuple], int] | None = None

    @property
    def warps(self) -> int:
        return sum(r.warps for r in self.roles)

    @property
    def threads(self) -> int:
        return 32 * self.warps


@dataclass(frozen=True)
class Schedule:
    """An algorithm's launches for one problem and tiling, in order."""

    algo: str
    problem: object
    tiling: object
    kernels: tuple[Kernel, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    # (B, heads, rows, cols) of global tensors whose shape the problem alone does not give (split-KV
    # workspace, a paged K/V cache, its page table), for the numeric interpreter
    shapes: dict = field(default_factory=dict)
