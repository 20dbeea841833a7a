"""The Hopper kernels' tile table (v3_tiles.tsv): the one list of what v3.cu / v3_fp8.cu are built with.

The build turns each row into a V3_ENTRY(...) line, the launcher picks its tile from the rows, the registry
lists them as variants, and the validator simulates the default row of the call it measured.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from flashsim.algorithms.tiling import Tiling
from flashsim.errors import FlashsimError

TABLE = Path(__file__).resolve().parent / "v3_tiles.tsv"
# name -> (ping-pong, overlap). The pingpong-* schedules are FA3's with more buffering: q2, two Q buffers
# (a persistent block loads its next tile's Q while the current one runs, and may take tiles from a
# counter: kernels/v3.cu); s3, three K/V stages.
SCHEDULES = {
    "pingpong": (1, 1), "overlap": (0, 1), "serial": (0, 0),
    "pingpong-q2": (1, 1), "pingpong-s3": (1, 1), "pingpong-q2s3": (1, 1),
}  # fmt: skip
STAGES = 2  # K/V stages, except where SCHEDULE_STAGES says
SCHEDULE_STAGES = {"pingpong-s3": 3, "pingpong-q2s3": 3}
Q_BUFFERS = {"pingpong-q2": 2, "pingpong-q2s3": 2}  # schedule -> Q buffers, 1 where not listed


def buffers(schedule: str) -> tuple[int, int]:
    """(Q buffers, K/V stages) of a schedule."""
    return Q_BUFFERS.get(schedule, 1), SCHEDULE_STAGES.get(schedule, STAGES)
TAGS = {"bf16": "Bf16", "fp16": "Fp16", "e4m3": "E4m3"}  # dtype -> the element type's name in v3.cu


@dataclass(frozen=True)
class Tile:
    """One entry point: an instantiation of v3::attention_fwd."""

    algo: str
    dtype: str
    headdim: int
    block_m: int
    block_n: int
    causal: bool
    schedule: str
    default: bool

    @property
    def tag(self) -> str:
        return TAGS[self.dtype]

    @property
    def q_buffers(self) -> int:
        return buffers(self.schedule)[0]

    @property
    def stages(self) -> int:
        return buffers(self.schedule)[1]

    @property
    def kernel(self) -> str:
        """The entry point's name, as V3_ENTRY (V3_ENTRY_Q2: suffix _q2) spells it."""
        pp, ov = SCHEDULES[self.schedule]
        suffix = "_q2" if self.q_buffers == 2 else ""
        return (
            f"v3_{self.tag}_d{self.headdim}_m{self.block_m}_n{self.block_n}_s{self.stages}_c{int(self.causal)}_p{pp}_o{ov}"
            + suffix
        )

    @property
    def entry_line(self) -> str:
        pp, ov = SCHEDULES[self.schedule]
        macro = "V3_ENTRY_Q2" if self.q_buffers == 2 else "V3_ENTRY"
        return (
            f"{macro}({self.tag}, {self.headdim}, {self.block_m}, {self.block_n}, {self.stages}, "
            f"{int(self.causal)}, {pp}, {ov})"
        )

    @property
    def smem(self) -> int:
        return smem_bytes(self.dtype, self.headdim, self.block_m, self.block_n, self.q_buffers, self.stages)

    @property
    def tiling(self) -> Tiling:
        """As algorithms.tiling spells a v3 tile: one producer plus block_m / 64 consumer warpgroups."""
        return Tiling(self.block_m, self.block_n, 4 * (self.block_m // 64 + 1), self.stages)


def parse(text: str) -> tuple[Tile, ...]:
    tiles = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 8:
            raise ValueError(f"{TABLE.name}:{number}: expected 8 fields, got {len(fields)}")
        algo, dtype, d, bm, bn, causal, schedule, default = fields
        if dtype not in TAGS or schedule not in SCHEDULES or causal not in ("0", "1") or default not in ("yes", "-"):
            raise ValueError(f"{TABLE.name}:{number}: bad row {line!r}")
        tiles.append(Tile(algo, dtype, int(d), int(bm), int(bn), causal == "1", schedule, default == "yes"))
    keys = [t.kernel for t in tiles]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{TABLE.name}: an entry point is listed twice")
    defaults = [(t.algo, t.dtype, t.headdim, t.causal) for t in tiles if t.default]
    if len(set(defaults)) != len(defaults):
        raise ValueError(f"{TABLE.name}: two defaults for one (algo, dtype, head dim, causal)")
    return tuple(tiles)


@functools.cache
def tiles(algo: str | None = None) -> tuple[Tile, ...]:
    """Every row (of one algorithm)."""
    rows = parse(TABLE.read_text())
    return rows if algo is None else tuple(t for t in rows if t.algo == algo)


def default_tile(algo: str, headdim: int, causal: bool, dtype: str | None = None) -> Tile:
    """The tile a call runs when it names none (dtype None: the first dtype listed; defaults agree)."""
    for t in tiles(algo):
        if t.default and t.headdim == headdim and t.causal == bool(causal) and dtype in (None, t.dtype):
            return t
    dims = sorted({t.headdim for t in tiles(algo)})
    raise FlashsimError(f"{algo} kernels are built for head dims {', '.join(map(str, dims))}, not {headdim}")


def find(algo: str, dtype: str, headdim: int, block_m: int, block_n: int, causal: bool, schedule: str) -> Tile:
    """The row of this entry point, or a FlashsimError listing what is built for the dtype."""
    for t in tiles(algo):
        if (t.dtype, t.headdim, t.block_m, t.block_n, t.causal, t.schedule) == (
            dtype, headdim, block_m, block_n, bool(causal), schedule,
        ):  # fmt: skip
            return t
    built = sorted(
        f"d{t.headdim} {t.block_m}x{t.block_n} {'causal' if t.causal else 'full'} {t.schedule}"
        for t in tiles(algo)
        if t.dtype == dtype
    )
    raise FlashsimError(
        f"{algo} has no {dtype} kernel for d{headdim} {block_m}x{block_n} "
        f"{'causal' if causal else 'non-causal'} {schedule}; built: {', '.join(built)}"
    )


def smem_bytes(
    dtype: str, headdim: int, block_m: int, block_n: int, q_buffers: int = 1, stages: int = STAGES
) -> int:
    """Dynamic shared memory of one thread block, as v3.cu lays it out (Cfg::SMEM): Q buffers, the K/V
    ring, barriers (and with two Q buffers their tile slots), alignment slack."""
    eb = 1 if dtype == "e4m3" else 2
    barriers = 8 * (2 * q_buffers + 4 * stages) + (8 * q_buffers if q_buffers > 1 else 0)
    return q_buffers * block_m * headdim * eb + 2 * stages * block_n * headdim * eb + barriers + 1024
