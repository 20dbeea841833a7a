"""Registry entries of the Hopper kernels (v3.cu, v3_fp8.cu; sm_90a only), from the tile table.

Each row of v3_tiles.tsv is one entry point; a Variant is one (head dim, dtype, tile) and its entries are
the (causal, schedule) pairs built for it. Calls launch through kernels/hopper.py (TMA tensor maps), so
run() here only refuses: kernels.attention routes v3 and v3-fp8 there before a family's run is used.
"""

from __future__ import annotations

from flashsim.errors import FlashsimError

from . import hopper_tiles
from .registry import KernelFamily, Variant, register

HEADERS = (
    "v3_wgmma.cuh",
    "v3_params.cuh",
    "v3_primitives.cuh",
    "v3_mainloop.cuh",
    "v3_tile_scheduler.cuh",
    "v3_epilogue.cuh",
    "v3_tiles.tsv",
)


def _variants(algo: str) -> tuple[Variant, ...]:
    seen: dict[Variant, None] = {}
    for t in hopper_tiles.tiles(algo):
        seen.setdefault(Variant(t.headdim, t.dtype, t.tiling))
    return tuple(seen)


def _entry(t: hopper_tiles.Tile) -> str:
    return f"{'causal' if t.causal else 'full'}-{t.schedule}"


def _kernels_of(algo: str):
    def symbols(variant: Variant) -> dict[str, str]:
        return {
            _entry(t): t.kernel for t in hopper_tiles.tiles(algo) if Variant(t.headdim, t.dtype, t.tiling) == variant
        }

    return symbols


def _smem_bytes(variant: Variant, entry: str) -> int:
    t = variant.tiling
    q_buffers, stages = hopper_tiles.buffers(entry.split("-", 1)[1])  # "causal-pingpong-q2" -> "pingpong-q2"
    return hopper_tiles.smem_bytes(variant.dtype, variant.headdim, t.block_m, t.block_n, q_buffers, stages)


def _default(algo: str):
    def tiling(headdim: int, causal: bool = False):
        return hopper_tiles.default_tile(algo, headdim, causal).tiling

    return tiling


def _run(kernels, variant, call) -> None:
    raise FlashsimError("the Hopper kernels launch through kernels.hopper (kernels.attention routes them there)")


def _family(algo: str, source: str, summary: str, extra_headers: tuple[str, ...] = ()) -> KernelFamily:
    default = _default(algo)
    entries = tuple(dict.fromkeys(_entry(t) for t in hopper_tiles.tiles(algo)))
    return KernelFamily(
        algo=algo,
        source=source,
        macro="V3_ENTRY",
        entries=entries,
        variants=_variants(algo),
        smem_bytes=_smem_bytes,
        default_tiling=lambda headdim, limits: default(headdim, False),
        run=_run,
        archs=("sm_90a",),
        summary=summary,
        headers=HEADERS + extra_headers,
        entry_lines=lambda: [t.entry_line for t in hopper_tiles.tiles(algo)],
        kernels_of=_kernels_of(algo),
        causal_tiling=default,
    )


V3 = register(_family("v3", "v3.cu", "FlashAttention-3: TMA producer, wgmma consumers, ping-pong + overlap"))
V3_FP8 = register(
    _family(
        "v3-fp8",
        "v3_fp8.cu",
        "FlashAttention-3 with e4m3 inputs, per-block scales; the fused quantisation pre-pass",
        ("v3.cu", "fp8_prepass.cuh"),
    )
)
