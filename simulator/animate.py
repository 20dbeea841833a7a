"""`flashsim animate`: one self-contained HTML page that replays a small run's timing trace.

The page is driven by the timing interpreter's real intervals (the ones `flashsim trace` writes) for the
first SMs of a whole-chip run, plus the running max m and sum l of one query row per K/V block, taken from
the numeric interpreter on the same problem (fixed seed). Everything (data, script, style) is inlined: the
page makes no network request.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from importlib import resources

import torch
from flashsim.algorithms import catalog
from flashsim.algorithms.ir import FP32_BYTES, GTile, Load, OnlineSoftmax, RescaleMerge, Store
from flashsim.algorithms.numeric import run_numeric
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import build
from flashsim.algorithms.schedules.v3 import WG_ROWS
from flashsim.algorithms.tiling import Tiling
from flashsim.errors import FlashsimError

ANIMATED = ("v1", "v2", "v3")
SEED = 0
# Events of the shown SMs the page will carry; a bigger problem makes the page slow, not wrong.
EVENT_LIMIT = 20_000
_TRACK = re.compile(r"^SM(\d+)[. ]")


def event_kind(name: str) -> str:
    """Colour class of a trace interval: load, store, tensor (GEMM), sfu (softmax and other elementwise
    work on the SFU/ALUs), wait or sync."""
    head = name.split()[0]
    return {"load": "load", "store": "store", "gemm": "tensor", "wait": "wait"}.get(head, "sfu")


def tile_bytes(schedule) -> dict[str, int]:
    """Bytes of one tile of each global tensor the schedule's first block loads or stores."""
    kernel = schedule.kernels[0]
    out: dict[str, int] = {}
    for role in kernel.roles:
        for op in role.program(kernel.ctas[0]):
            tile = op.src if isinstance(op, Load) else op.dst if isinstance(op, Store) else None
            if tile is not None:
                out[tile.tensor] = max(out.get(tile.tensor, 0), tile.nbytes)
    return out


def _warpgroups(algo: str) -> bool:
    """Whether the schedule runs wgmma consumer warpgroups fed by a TMA producer through a ring (V3)."""
    return catalog.get(algo).mma == "wgmma"


def register_tiles(algo: str, problem: Problem, t: Tiling) -> dict[str, int]:
    """Bytes of the register tiles of one thread block (v3: one consumer warpgroup's 64 rows)."""
    rows = WG_ROWS if _warpgroups(algo) else t.block_m
    return {
        "S/P": rows * t.block_n * FP32_BYTES,
        "O acc": rows * problem.headdim * FP32_BYTES,
        "m, l": 2 * rows * FP32_BYTES,
    }


def _row0_block(kernel) -> int:
    """Position in launch order of the thread block (or work tile) that holds query row 0 of head 0."""
    return next(i for i, c in enumerate(kernel.ctas) if c[:3] == (0, 0, 0))


def step_type(kernel) -> type:
    """The op after which a row's running (m, l) is final for one K/V block: the merge where a schedule
    merges tile statistics into the running ones (V1), else the online softmax itself."""
    for role in kernel.roles:
        if any(isinstance(op, RescaleMerge) for op in role.program(kernel.ctas[0])):
            return RescaleMerge
    return OnlineSoftmax


def _row0_steps(role, cta, step: type):
    """Yield (op, whether it is a step for the tile holding row 0) along one role's program. Row 0 is in
    consumer 0's rows (v3) or, for a single role, in the Q tile it loaded last (v1 visits several)."""
    q_row = 0 if role.name in ("warps", "consumer0") else None
    for op in role.program(cta):
        if isinstance(op, Load) and op.src.tensor == "Q" and role.name == "warps":
            q_row = op.src.row
        yield op, isinstance(op, step) and q_row == 0


def row_statistics(algo: str, problem: Problem, t: Tiling, seed: int = SEED) -> list[dict]:
    """Running (m, l) of query row 0 of head 0 after each K/V block, from the numeric interpreter, and
    `step`: the how-manieth step op of its role's program (softmax, or v1's merge) produced them.

    The thread block holding row 0 runs with each role's program extended by two stores after every
    such step: its current m and l rows, into scratch global tensors."""
    schedule = build(algo, problem, t)
    kernel = schedule.kernels[0]
    cta = kernel.ctas[_row0_block(kernel)]
    step = step_type(kernel)
    ordinals: list[int] = []

    def traced(role):
        def program(block):
            done, steps = 0, 0
            for op, row0 in _row0_steps(role, block, step):
                yield op
                if row0:
                    yield Store(op.m, GTile("row_m", 0, 0, done, 1, 0, 1, FP32_BYTES))
                    yield Store(op.l, GTile("row_l", 0, 0, done, 1, 0, 1, FP32_BYTES))
                    ordinals.append(steps)
                    done += 1
                steps += isinstance(op, step)

        return dataclasses.replace(role, program=program)

    one = dataclasses.replace(kernel, ctas=[cta], roles=tuple(traced(r) for r in kernel.roles), carry=None)
    gen = torch.Generator().manual_seed(seed)
    shape_q = (problem.batch, problem.heads, problem.seqlen_q, problem.headdim)
    shape_kv = (problem.batch, problem.kv_heads, problem.seqlen_k, problem.headdim)
    inputs = {"Q": torch.randn(shape_q, generator=gen), "K": torch.randn(shape_kv, generator=gen),
              "V": torch.randn(shape_kv, generator=gen)}
    mem = run_numeric(dataclasses.replace(schedule, kernels=(one,)), inputs)
    m, l = mem.get("row_m"), mem.get("row_l")
    return [{"block": j, "m": float(m[0, 0, j, 0]), "l": float(l[0, 0, j, 0]), "step": ordinals[j]}
            for j in range(len(ordinals))]


def shown_tracks(trace: list, sms: int, first: int = 0) -> list[str]:
    """Tracks of `sms` SMs that ran anything, from SM `first` on, SM by SM, the copy engine first."""
    by_sm: dict[int, set[str]] = {}
    for track, *_ in trace:
        match = _TRACK.match(track)
        if match:
            by_sm.setdefault(int(match.group(1)), set()).add(track)
    chosen = sorted(by_sm, key=lambda sm: (sm < first, sm))[:sms]
    return [t for sm in chosen for t in sorted(by_sm[sm], key=lambda n: (" " not in n.split(".")[0] or "." in n, n))]


def _number_tiles(events: list[dict], algo: str, kv_blocks: int) -> None:
    """Label each load with its tile index j within its thread block (or work tile): per copy track,
    K and V count from 0 again where a block's Q arrives (v1 reloads Q each step: its K/V count modulo
    the K/V blocks instead). The trace names a copy's SM, not its block: where two blocks share an SM
    (v2 on a grid larger than the chip) their copies are numbered as one sequence."""
    kv_outer = catalog.get(algo).kv_outer_loop
    counts: dict[tuple, int] = {}
    last_q: dict[str, bool] = {}
    for ev in sorted((e for e in events if e["kind"] == "load"), key=lambda e: e["start"]):
        track, tensor = ev["track"], ev["tensor"]
        if tensor == "Q" and not kv_outer and not last_q.get(track):
            for key in [k for k in counts if k[0] == track]:
                del counts[key]
        last_q[track] = tensor == "Q"
        if tensor in ("K", "V"):
            j = counts.get((track, tensor), 0)
            counts[(track, tensor)] = j + 1
            ev["j"] = j % kv_blocks if kv_outer else j


def ring_states(events: list[dict], stages: int) -> list[dict]:
    """v3's K and V ring slots per SM: a slot is loading while its TMA copy runs, full from landing until
    every consumer warpgroup's GEMM that reads it has finished (K_j: the j-th S = Q K^T of the work tile,
    V_j: its j-th O += P V), then empty until the producer refills it."""
    out = []
    by_sm: dict[int, list[dict]] = {}
    for e in events:
        by_sm.setdefault(e["sm"], []).append(e)
    for sm_events in by_sm.values():
        sm_events.sort(key=lambda e: e["start"])
        # a work tile starts where its Q slices are copied (the producer copies nothing else in between)
        tile_starts, previous = [], None
        for e in sm_events:
            if e["kind"] == "load":
                if e["tensor"] == "Q" and previous != "Q":
                    tile_starts.append(e["start"])
                previous = e["tensor"]
        tile_starts.append(float("inf"))
        for lo, hi in zip(tile_starts, tile_starts[1:], strict=False):
            window = [e for e in sm_events if lo <= e["start"] < hi]
            readers: dict[tuple[str, str], list[int]] = {}
            for e in window:
                if e["name"] in ("gemm s", "gemm o"):
                    readers.setdefault((e["name"], e["track"]), []).append(e["end"])
            for ev in window:
                if ev["kind"] != "load" or ev["tensor"] not in ("K", "V"):
                    continue
                gemm = "gemm s" if ev["tensor"] == "K" else "gemm o"
                ends = [ends[ev["j"]] for (name, _), ends in readers.items() if name == gemm and ev["j"] < len(ends)]
                out.append({"sm": ev["sm"], "slot": f"{ev['tensor']}{ev['j'] % stages}", "j": ev["j"],
                            "load": ev["start"], "full": ev["end"], "empty": max(ends, default=ev["end"])})
    return out


def build_animation(algo: str, problem: Problem, profile, tiling: Tiling, sms: int = 2) -> dict:
    """Everything the page draws, as plain JSON-able data."""
    from .api import simulate
    from .gpu import blocks_per_sm

    if algo not in ANIMATED:
        raise FlashsimError(f"animate draws {', '.join(ANIMATED)}; got {algo}")
    if not 1 <= sms <= 4:
        raise FlashsimError(f"--sms must be between 1 and 4, got {sms}")
    trace: list = []
    result = simulate(algo, problem, profile, tiling, sms=None, trace=trace, extrapolate=False)
    schedule = build(algo, problem, tiling)
    kernel = schedule.kernels[0]
    # a first-wave block k runs on SM k % SMs, in slot k // SMs (the scheduler fills slot 0 of every SM first)
    home = _row0_block(kernel)
    home_sm, home_slot = home % profile.sm_count, home // profile.sm_count
    tracks = shown_tracks(trace, sms, home_sm)
    index = {t: i for i, t in enumerate(tracks)}
    events = []
    for track, name, start, end in trace:
        if track in index:
            sm = int(_TRACK.match(track).group(1))
            ev = {"track": track, "sm": sm, "name": name, "kind": event_kind(name), "start": start, "end": end}
            if ev["kind"] in ("load", "store"):
                ev["tensor"] = name.split()[1]
            events.append(ev)
    if len(events) > EVENT_LIMIT:
        raise FlashsimError(f"the shown SMs record {len(events):,} intervals (limit {EVENT_LIMIT:,}): "
                            "use a smaller --seqlen")
    kv_blocks = -(-problem.seqlen_k // tiling.block_n)
    _number_tiles(events, algo, kv_blocks)
    events.sort(key=lambda e: (e["start"], index[e["track"]]))
    stats = row_statistics(algo, problem, tiling)
    # the trace names an OnlineSoftmax interval "softmax" and other elementwise ops by their class
    stat_name = "softmax" if step_type(kernel) is OnlineSoftmax else step_type(kernel).__name__.lower()
    role = "consumer0" if _warpgroups(algo) else "warps"
    stat_track = f"SM{home_sm}.{home_slot} {role}"
    # the row-0 block is the first its worker runs when it belongs to the first wave: its n-th softmax (or
    # merge) on that track is the program's n-th step
    stat_ends = [e["end"] for e in events if e["track"] == stat_track and e["name"] == stat_name]
    first_wave = home < profile.sm_count * blocks_per_sm(kernel, profile)
    for s in stats:
        s["cycle"] = stat_ends[s["step"]] if first_wave and s["step"] < len(stat_ends) else None
    return {
        "algo": algo,
        "hw": profile.name,
        "problem": problem.describe(),
        "tiling": tiling.describe(),
        "clock_hz": result.kernels[0]["clock_hz"] if result.kernels else profile.sm_clock_hz,
        "cycles": max((e["end"] for e in events), default=result.cycles),
        "run_cycles": result.cycles,
        "run_bytes": result.bytes,
        "bound_by": result.bound_by,
        "tracks": tracks,
        "events": [[index[e["track"]], e["name"], e["kind"], e["start"], e["end"], e.get("tensor", ""),
                    e.get("j", -1)] for e in events],
        "tile_bytes": tile_bytes(schedule),
        "register_bytes": register_tiles(algo, problem, tiling),
        "smem_bytes": schedule.kernels[0].smem_bytes,
        "stages": tiling.stages if _warpgroups(algo) else 0,
        "ring": ring_states(events, tiling.stages) if _warpgroups(algo) else [],
        "row_stats": stats,
        "kv_blocks": kv_blocks,
        "seed": SEED,
    }


def render_page(data: dict) -> str:
    """The page: the template with the data embedded as JSON (closing tags escaped)."""
    template = resources.files("flashsim.simulator").joinpath("animate.html").read_text()
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    title = html.escape(f"flashsim animate: {data['algo']} on {data['hw']}")
    return template.replace("__TITLE__", title).replace("__DATA__", blob)
