"""What an algorithm is, in one record: its schedule, its default mapping, its footprint and its closed forms.

Each module of algorithms/schedules/ exports one `ALGORITHM = Algorithm(...)`; algorithms/catalog.py holds
them. Code elsewhere asks the record (`catalog.get(name).mma`, `.features`, ...) instead of comparing names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flashsim.errors import FlashsimError

from .mapping import Tiling
from .problem import Problem


@dataclass(frozen=True)
class Algorithm:
    """One schedule and everything per algorithm the interpreters, the mapper and the commands need.

    build(problem, tiling, **options) -> Schedule: the program of tile ops (options: those named in `options`).
    mapper(problem, profile) -> Tiling: the default tiles (a public kernel's choice); footprint.fit then
        shrinks them when the profile or dtype cannot hold them.
    smem_bytes / registers(problem, tiling): shared memory per block and registers per thread it needs.
    register_budget(tiling, profile) -> (registers per thread allowed, registers per thread at launch);
        None: the profile's per-thread maximum, and `registers` at launch.
    check_tiling(problem, tiling): refusals beyond the instruction's shape rule (e.g. V3's warpgroups).
    complete_tiling(tiling): fields a user override implies (V3: warps follow block_m).
    loop_nest(dims, **options) -> [KernelNest]: the closed forms (algorithms/closed_form.py), or None.
    why: `flashsim explain`'s line on where the global-memory traffic comes from ({tc}, {tr}, {stages}).
    mma: the tensor-core instruction ('mma_sync' or 'wgmma'): the roofline's peak and the tile shape rule.
    features: what a profile must have (profile.has); dtypes: input dtypes, the first one the default.
    forward: set on a backward schedule (algorithms/backward.py): the forward it belongs to, which --pass maps.
    """

    name: str
    summary: str
    build: Callable
    mapper: Callable[[Problem, object], Tiling]
    smem_bytes: Callable[[Problem, Tiling], int]
    registers: Callable[[Problem, Tiling], int]
    loop_nest: Callable | None = None  # None: no closed form (count_io still counts the ops)
    why: str = ""
    mma: str = "mma_sync"
    features: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ("bf16", "fp16", "fp32")
    register_budget: Callable[[Tiling, object], tuple[int, int]] | None = None
    check_tiling: Callable[[Problem, Tiling], None] | None = None
    complete_tiling: Callable[[Tiling], Tiling] | None = None
    paper_tiling: Callable[[Problem, object], Tiling] | None = None  # a paper's own blocks (--paper-tiles)
    options: tuple[str, ...] = ()
    warp_split: str = "m"  # how mma.sync warps divide a tile: 'm' (rows, split-Q) or 'n' (keys, split-K)
    block_n_is_k: bool = True  # block_n is the k of O += P V (False: only ever an n, as in standard's GEMMs)
    kv_outer_loop: bool = False  # the outer loop runs over K/V blocks and Q_i, O_i pass through global memory (V1)
    probe_outer_steps: bool = False  # the timing run may probe a long outer K/V loop (simulator/api.py)
    # the tensors beyond Q, K, V and O it keeps in global memory, bytes by name (algorithms/memory.py)
    hbm_tensors: Callable[[Problem, Tiling], dict[str, int]] | None = None
    input_bytes: int | None = None  # bytes per element of Q, K, V as the caller passes them (None: the dtype's)
    # auto_splits(problem, tiling, profile) -> K/V splits (`--splits auto`); None: the record does not split K/V
    auto_splits: Callable[[Problem, Tiling, object], int] | None = None
    layouts: tuple[str, ...] = ()  # input layouts beyond dense padded tensors: 'varlen', 'paged'
    max_seqlen_q: int = 0  # queries per sequence it takes at most (decode: 16); 0: any
    forward: str = ""  # a backward schedule: the forward schedule whose gradients it computes ('' for a forward)

    def takes(self, problem: Problem) -> bool:
        """Whether the problem's query length is one this schedule is for (commands that run every algorithm
        leave the others out)."""
        return not self.max_seqlen_q or problem.seqlen_q <= self.max_seqlen_q

    @property
    def pass_(self) -> str:
        """'bwd' for a backward schedule, else 'fwd'."""
        return "bwd" if self.forward else "fwd"

    @property
    def default_dtype(self) -> str:
        return self.dtypes[0]

    def schedule(self, problem: Problem, tiling: Tiling, **options):
        """build() with the options this algorithm takes (others are ignored)."""
        for layout, used, what in (("varlen", problem.varlen, "variable-length batches (--seqlens)"),
                                   ("paged", problem.page_size, "a paged K/V cache (--page-size)")):
            if used and layout not in self.layouts:
                takers = [r.name for r in _takers(layout)]
                raise FlashsimError(f"{self.name} does not take {what}; {', '.join(takers)} do")
        return self.build(problem, tiling, **{k: v for k, v in options.items() if k in self.options})


def _takers(layout: str) -> list[Algorithm]:
    from .catalog import records

    return [r for r in records() if layout in r.layouts]
