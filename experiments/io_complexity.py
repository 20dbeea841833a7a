"""Theorem 2 of FlashAttention (Dao et al. 2022), measured on the schedules.

Standard attention moves Theta(N d + N^2) bytes of global memory; FlashAttention moves Theta(N^2 d^2 / M)
for d <= M <= N d, M the on-chip memory one thread block may use. Every count here is the counting
interpreter's (algorithms/counting.py) walk of the real schedules at batch = heads = 1 (bytes scale linearly
in both), fp16 by default.

M is varied the way a user would: the profile's smem_per_block_max_bytes (`--set smem_per_block_max_bytes=`),
from which V1's tiles follow (Algorithm 1: Bc = M / 4d, Br = min(Bc, d); not the default tiling, which also
shrinks them to fit registers). V2's default tiles are fixed by its kernels and would not feel M, so in this
experiment V2 runs square Br = Bc = V1's Bc tiles. Standard attention keeps its 128 x 128 GEMM tiles whatever
M is.

Each exponent is fitted in its regime: N with d and M fixed, d with N and M fixed, M with N and d fixed,
always with d <= M <= N d / 4 and N a multiple of every Bc (no ragged blocks), and N / Bc >= 16 so the
N^2 d^2 / M term dominates the Theta(N d) reads of K and V. A last sweep pushes M past N d, where the flash
algorithms' traffic stops falling as 1 / M and settles at Theta(N d) (one pass over Q, K, V and O).

`--pass bwd` measures the backward schedules the same way (standard-bwd, v2-bwd, v3-bwd) and `--pass fwd+bwd`
a training step's two passes summed (standard, v2, v3). FlashAttention's backward (its Algorithm 4) takes the
forward's Bc = M / 4d: each K/V block of Bc keys streams Q, dO, LSE and D past it and adds into dQ, so the
traffic is Theta(N^2 d^2 / M) again; standard attention's backward reads and writes P, dP and dS, Theta(N d + N^2).
v2-bwd runs square Bc x Bc tiles, v3-bwd 64-row Q blocks against Bc keys (its Q block does not change the bytes
beyond ragged edges), and v3's forward, in fwd+bwd, square tiles like v2's.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

import numpy as np
from flashsim.algorithms import Problem
from flashsim.algorithms.counting import count_io
from flashsim.algorithms.problem import DTYPE_BYTES
from flashsim.algorithms.schedules import build
from flashsim.algorithms.tiling import Tiling, default_tiling, sram_elements, v1_blocks
from flashsim.console import make_console
from flashsim.errors import FlashsimError
from flashsim.units import format_bytes

ALGOS = ("standard", "v1", "v2")  # the forward's series
FLASH_THEORY = "Theta(N^2 d^2 / M): N^2 d^2 M^-1"
STANDARD_THEORY = "Theta(N d + N^2): N^2, d^0..1 (d enters through the GEMMs' re-reads), M^0"
THEORY = {
    "standard": STANDARD_THEORY, "v1": FLASH_THEORY, "v2": FLASH_THEORY,
    "standard-bwd": STANDARD_THEORY, "v2-bwd": FLASH_THEORY, "v3-bwd": FLASH_THEORY,
    "standard fwd+bwd": STANDARD_THEORY, "v2 fwd+bwd": FLASH_THEORY, "v3 fwd+bwd": FLASH_THEORY,
}
# The series of each pass, by label; the first flash series is the one the table's tile and ratio columns show.
PASS_SERIES = {
    "fwd": ALGOS,
    "bwd": ("standard-bwd", "v2-bwd", "v3-bwd"),
    "fwd+bwd": ("standard fwd+bwd", "v2 fwd+bwd", "v3 fwd+bwd"),
}
REFERENCE = {"fwd": "v1", "bwd": "v2-bwd", "fwd+bwd": "v2 fwd+bwd"}
# Kv-block counts Tc = N / Bc of each fit's points: >= 16 keeps the leading term dominant, <= 48 keeps the
# whole experiment to about a second of counting.
PASSES = (16, 24, 32, 48)
# The fixed sizes of each sweep (M in elements; V1's Bc = M / 4d). M = 3 * 2^14 makes Bc an integer for
# d = 64, 96, 128, 192 and N = 3072 a multiple of every Bc.
FIT_D = 64
N_SWEEP_M = 4 * FIT_D * 64  # Bc = 64
D_SWEEP_N, D_SWEEP_M = 3072, 3 * 2**14
M_SWEEP_N = 3072
SAT_N, SAT_D = 256, 64  # small, so that M can pass N d without the points getting expensive
SAT_BC = (16, 32, 64, 128, 256, 512, 1024)
PROFILE_N = 4096  # the point at the profile's own M


@dataclass(frozen=True)
class Point:
    sweep: str  # 'N', 'd', 'M', 'saturation' or 'profile'
    algo: str
    N: int
    d: int
    M_bytes: int
    M_elements: int
    block_m: int
    block_n: int
    hbm_bytes: int


def with_sram(profile, m_bytes: int):
    """The profile with smem_per_block_max_bytes = m_bytes (growing the SM's pool too if m_bytes needs it)."""
    overrides = {"smem_per_block_max_bytes": m_bytes}
    need = m_bytes + profile.smem_reserved_per_block_bytes
    if need > profile.smem_per_sm_bytes:
        overrides["smem_per_sm_bytes"] = need
    return profile.with_overrides(overrides)


def _algorithm1_tiles(problem: Problem, profile, warps: int, stages: int, square: bool) -> Tiling:
    br, bc = v1_blocks(sram_elements(profile, problem), problem.headdim)
    return Tiling(bc, bc, warps, stages) if square else Tiling(br, bc, warps, stages)


# The tiles of this experiment: Algorithm 1's for V1 (as the theorem assumes; the default tiling also shrinks
# them to fit registers, which is beside the point of counting bytes), V1's Bc squared for V2 and both
# backward schedules' key blocks, and standard attention's GEMM tiles (its bytes do not depend on M; not shrunk
# to the swept M, as they do not live in it).
def _bc(problem: Problem, profile) -> int:
    return v1_blocks(sram_elements(profile, problem), problem.headdim)[1]


TILINGS = {
    "standard": lambda problem, profile: default_tiling("standard", problem, None),
    "v1": lambda problem, profile: _algorithm1_tiles(problem, profile, 4, 1, square=False),
    "v2": lambda problem, profile: _algorithm1_tiles(problem, profile, 4, 2, square=True),
    "v3": lambda problem, profile: Tiling(_bc(problem, profile), _bc(problem, profile), 12, 2),
    "standard-bwd": lambda problem, profile: default_tiling("standard-bwd", problem, None),
    "v2-bwd": lambda problem, profile: _algorithm1_tiles(problem, profile, 8, 2, square=True),
    "v3-bwd": lambda problem, profile: Tiling(64, _bc(problem, profile), 12, 2),
}
# label -> the schedules whose bytes add up to its point
SERIES = {
    **{name: (name,) for name in TILINGS},
    "standard fwd+bwd": ("standard", "standard-bwd"),
    "v2 fwd+bwd": ("v2", "v2-bwd"),
    "v3 fwd+bwd": ("v3", "v3-bwd"),
}
# The flash series, whose traffic settles at one pass over their tensors past M = N d.
SATURATING = ("v1", "v2", "v2-bwd", "v3-bwd", "v2 fwd+bwd", "v3 fwd+bwd")


def tiling_for(algo: str, problem: Problem, profile) -> Tiling:
    return TILINGS[algo](problem, profile)


def measure(sweep: str, algo: str, n: int, d: int, m_bytes: int, profile, dtype: str) -> Point:
    """One point of series `algo` (a schedule, or a forward and its backward summed)."""
    problem = Problem(1, 1, n, d, dtype=dtype)
    sized = with_sram(profile, m_bytes)
    tilings = [tiling_for(name, problem, sized) for name in SERIES[algo]]
    hbm = sum(count_io(build(name, problem, t)).gmem_bytes for name, t in zip(SERIES[algo], tilings, strict=True))
    t = tilings[-1]
    return Point(sweep, algo, n, d, m_bytes, m_bytes // problem.elem_bytes, t.block_m, t.block_n, hbm)


def plan(profile, dtype: str) -> list[tuple[str, int, int, int]]:
    """(sweep, N, d, M bytes) of every point, before anything is counted."""
    e = DTYPE_BYTES[dtype]
    bc = N_SWEEP_M // (4 * FIT_D)
    points = [("N", bc * p, FIT_D, N_SWEEP_M * e) for p in PASSES]
    for p in PASSES:  # d grows with the passes at fixed N and M: Tc = N / Bc = 4 N d / M
        points.append(("d", D_SWEEP_N, p * D_SWEEP_M // (4 * D_SWEEP_N), D_SWEEP_M * e))
    for p in reversed(PASSES):  # M shrinks as the passes grow: Bc = N / Tc
        points.append(("M", M_SWEEP_N, FIT_D, 4 * FIT_D * (M_SWEEP_N // p) * e))
    points += [("saturation", SAT_N, SAT_D, 4 * SAT_D * b * e) for b in SAT_BC]
    m = profile.smem_per_block_max_bytes
    if m // e < 4 * FIT_D:
        raise FlashsimError(
            f"smem_per_block_max_bytes={m} holds less than one row each of Q, K, V and O at d={FIT_D} "
            f"({4 * FIT_D * e} B in {dtype}); Algorithm 1 needs M >= 4 d"
        )
    points.append(("profile", PROFILE_N, FIT_D, m))
    return points


def fit_exponent(xs, ys) -> float:
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float)), 1)[0])


def fits(points: list[Point], series: tuple[str, ...] = ALGOS) -> dict[str, dict[str, float]]:
    out = {}
    for algo in series:
        out[algo] = {}
        for var, attr in (("N", "N"), ("d", "d"), ("M", "M_elements")):
            sel = [p for p in points if p.algo == algo and p.sweep == var]
            slope = fit_exponent([getattr(p, attr) for p in sel], [p.hbm_bytes for p in sel])
            out[algo][var] = round(slope, 4) + 0.0  # + 0.0: no -0.0 in the output
    return out


def saturation(points: list[Point]) -> dict:
    """Past M = N d: bytes in units of N d (elements) and the exponent of M fitted where Tc = 1."""
    out = {}
    for algo in dict.fromkeys(p.algo for p in points if p.algo in SATURATING):
        sel = [p for p in points if p.algo == algo and p.sweep == "saturation"]
        nd = SAT_N * SAT_D
        above = [p for p in sel if p.M_elements >= 4 * nd]  # Bc >= N: a single kv pass
        slope = fit_exponent([p.M_elements for p in above], [p.hbm_bytes for p in above])
        out[algo] = {
            "N": SAT_N,
            "d": SAT_D,
            "M_over_Nd": [p.M_elements / nd for p in sel],
            "bytes_over_Nd": [round(p.hbm_bytes / nd, 3) for p in sel],
            "M_exponent_past_4Nd": round(slope, 4) + 0.0,
        }
    return out


def run(profile, dtype: str = "fp16", progress: bool = True, pass_: str = "fwd") -> dict:
    if dtype not in DTYPE_BYTES or dtype == "fp8":
        raise FlashsimError(f"dtype {dtype!r} is not one of fp32, fp16, bf16 (fp8 is v3-fp8's alone)")
    if pass_ not in PASS_SERIES:
        raise FlashsimError(f"unknown pass {pass_!r}; choose one of {', '.join(PASS_SERIES)}")
    series = PASS_SERIES[pass_]
    _check_dtype(series, dtype)
    todo = [(s, a, n, d, m) for s, n, d, m in plan(profile, dtype) for a in series]
    points = []
    with _progress(progress) as bar:
        task = bar.add_task("counting bytes", total=len(todo))
        for sweep, algo, n, d, m in todo:
            points.append(measure(sweep, algo, n, d, m, profile, dtype))
            bar.advance(task)
    return {
        "profile": profile.name,
        "dtype": dtype,
        "pass": pass_,
        "theory": {a: THEORY[a] for a in series},
        "fits": fits(points, series),
        "saturation": saturation(points),
        "points": [asdict(p) for p in points],
    }


def _check_dtype(series: tuple[str, ...], dtype: str) -> None:
    from flashsim.algorithms import catalog

    for label in series:
        for name in SERIES[label]:
            if dtype not in catalog.get(name).dtypes:
                raise FlashsimError(f"{name} takes {', '.join(catalog.get(name).dtypes)}, not {dtype}")


def _progress(enabled: bool):
    """A transient bar on stderr, so stdout stays one JSON object under --json."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not (enabled and console.is_terminal),
    )


# -- presentation ---------------------------------------------------------------------------------------


def print_report(result: dict, console) -> None:
    from rich import box
    from rich.table import Table

    series = PASS_SERIES[result.get("pass", "fwd")]
    ref_name = REFERENCE[result.get("pass", "fwd")]
    rows: dict[tuple, dict[str, dict]] = {}
    for p in result["points"]:
        rows.setdefault((p["sweep"], p["N"], p["d"], p["M_bytes"]), {})[p["algo"]] = p
    title = "Global-memory bytes" + ("" if result.get("pass", "fwd") == "fwd" else f" of the {result['pass']} pass")
    table = Table(title=f"{title} ({result['dtype']}, batch = heads = 1, {result['profile']})", box=box.SIMPLE_HEAD)
    for col in ("sweep", "N", "d", "M", "M / Nd", f"{ref_name} Br x Bc", *series,
                f"{ref_name} / (N^2 d^2 / M)"):
        table.add_column(col, justify="left" if col == "sweep" else "right", no_wrap=True)
    for (sweep, n, d, m_bytes), by_algo in rows.items():
        ref = by_algo[ref_name]
        m = ref["M_elements"]
        table.add_row(
            sweep,
            str(n),
            str(d),
            format_bytes(m_bytes),
            f"{m / (n * d):.3g}",
            f"{ref['block_m']} x {ref['block_n']}",
            *(format_bytes(by_algo[a]["hbm_bytes"]) for a in series),
            f"{ref['hbm_bytes'] / (n * n * d * d / m):.3g} B",
        )
    console.print(table)

    fit_table = Table(title="Fitted exponents (least squares on log-log)", box=box.SIMPLE_HEAD)
    for col in ("algorithm", "N", "d", "M", "Theorem 2"):
        fit_table.add_column(col, justify="left" if col in ("algorithm", "Theorem 2") else "right")
    for algo, f in result["fits"].items():
        fit_table.add_row(algo, f"{f['N']:.3f}", f"{f['d']:.3f}", f"{f['M']:.3f}", result["theory"][algo])
    console.print(fit_table)
    for algo, s in result["saturation"].items():
        ms = ", ".join(f"{v:g}" for v in s["M_over_Nd"])
        ratios = ", ".join(f"{v:g}" for v in s["bytes_over_Nd"])
        console.print(
            f"Past M = N d ({algo}, N={s['N']}, d={s['d']}): at M / (N d) = {ms}, bytes / (N d) = {ratios}. "
            f"The 1 / M fall stops near M = N d and the traffic settles at Theta(N d) (one pass over each tensor; "
            f"exponent of M once Bc >= N: {s['M_exponent_past_4Nd']:.3f})."
        )


def plot(result: dict, plot_dir: str) -> list[str]:
    """The four sweeps as log-log panels; returns the written paths (PNG and SVG)."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pass_ = result.get("pass", "fwd")
    series = PASS_SERIES[pass_]
    panels = (
        ("N", "N", "N (d, M fixed)"),
        ("d", "d", "d (N, M fixed)"),
        ("M", "M_elements", "M elements (N, d fixed)"),
        ("saturation", "M_elements", f"M elements past N d (N={SAT_N}, d={SAT_D})"),
    )
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    for ax, (sweep, attr, label) in zip(axes, panels, strict=True):
        for algo, marker in zip(series, "sox", strict=True):
            sel = [p for p in result["points"] if p["algo"] == algo and p["sweep"] == sweep]
            if sweep == "saturation" and algo not in SATURATING:
                continue
            fit = result["fits"][algo].get(sweep)
            name = f"{algo} (slope {fit:.2f})" if fit is not None else algo
            ax.loglog([p[attr] for p in sel], [p["hbm_bytes"] for p in sel], marker=marker, label=name)
        if sweep == "saturation":
            ax.axvline(SAT_N * SAT_D, color="grey", linestyle="--", linewidth=1, label="M = N d")
        ax.set_xlabel(label)
        ax.set_ylabel("global-memory bytes")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    what = "" if pass_ == "fwd" else f", {pass_} pass"
    fig.suptitle(f"IO complexity (FlashAttention Theorem 2{what}): standard ~ N^2, flash ~ N^2 d^2 / M")
    fig.tight_layout()
    os.makedirs(plot_dir, exist_ok=True)
    stem = "io_complexity" if pass_ == "fwd" else f"io_complexity-{pass_}"
    paths = [os.path.join(plot_dir, f"{stem}.{ext}") for ext in ("png", "svg")]
    for path in paths:
        fig.savefig(path, dpi=120)
    plt.close(fig)
    return paths


def main(args) -> int:
    """`flashsim io`: the experiment, a table (or one JSON object) and the plots."""
    import json

    from flashsim.hw_profiles.commands import profile_from_args

    profile = profile_from_args(args)
    result = run(profile, args.dtype, progress=True, pass_=getattr(args, "pass_", "fwd"))
    if not args.no_plot:
        result["plots"] = plot(result, args.plot_dir)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
        return 0
    console = make_console()
    print_report(result, console)
    if not args.no_plot:
        console.print("plots: " + ", ".join(result["plots"]))
    return 0
