"""The mapping of a problem onto the SM: tile sizes, warps and pipeline depth (Timeloop's "mapping").

A Tiling is data only. The heuristic that picks one is each algorithm record's mapper, and whether it fits
an SM is algorithms/footprint.py's question.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from flashsim.errors import FlashsimError

from .ir import EXP2_FORMS, O_STORE_FORMS, PIPELINE_FORMS


@dataclass(frozen=True)
class Tiling:
    """block_m: query rows per tile (Br); block_n: key rows per tile (Bc); warps: per thread block
    (v3: 4 per warpgroup, the producer included); stages: depth of the K/V shared-memory ring; o_store: how
    the epilogue writes O (v3); exp2: how the kernel's code computes the softmax's exponential
    (ir.EXP2_FORMS; v2 only); pipeline: how a consumer orders its GEMMs and softmax (ir.PIPELINE_FORMS; v3)."""

    block_m: int
    block_n: int
    warps: int
    stages: int = 2
    splits: int = 1  # v1: thread blocks per (batch, head), each taking every splits-th Q block (1: the paper)
    exp2: str = EXP2_FORMS[0]
    o_store: str = O_STORE_FORMS[0]  # how the epilogue writes O (ir.O_STORE_FORMS; v3 only)
    pipeline: str = PIPELINE_FORMS[0]  # the consumers' GEMM and softmax order (ir.PIPELINE_FORMS; v3 only)

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "warps", "stages", "splits"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise FlashsimError(f"tiling {name} must be a positive integer, got {value!r}")
        if self.exp2 not in EXP2_FORMS:
            raise FlashsimError(f"tiling exp2 must be one of {', '.join(EXP2_FORMS)}, got {self.exp2!r}")
        if self.o_store not in O_STORE_FORMS:
            raise FlashsimError(f"tiling o_store must be one of {', '.join(O_STORE_FORMS)}, got {self.o_store!r}")
        if self.pipeline not in PIPELINE_FORMS:
            raise FlashsimError(f"tiling pipeline must be one of {', '.join(PIPELINE_FORMS)}, got {self.pipeline!r}")

    @property
    def threads(self) -> int:
        return 32 * self.warps

    def as_dict(self) -> dict:
        d = asdict(self)
        if self.exp2 == EXP2_FORMS[0]:
            del d["exp2"]  # the default forms: records read as before
        if self.o_store == O_STORE_FORMS[0]:
            del d["o_store"]
        if self.pipeline == PIPELINE_FORMS[0]:
            del d["pipeline"]
        return d

    def describe(self) -> str:
        splits = f", {self.splits} splits" if self.splits > 1 else ""
        exp2 = f", {self.exp2}" if self.exp2 != EXP2_FORMS[0] else ""
        o_store = f", O stored from {self.o_store}" if self.o_store != O_STORE_FORMS[0] else ""
        serial = ", GEMMs waited at once" if self.pipeline != PIPELINE_FORMS[0] else ""
        return f"{self.block_m}x{self.block_n}, {self.warps} warps, {self.stages} stages{splits}{exp2}{o_store}{serial}"
