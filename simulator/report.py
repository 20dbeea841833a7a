"""Rendering simulation results: terminal tables and plots (rich and matplotlib imported on use). Sizes are
written in binary units and rates in decimal ones (flashsim/units.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

from flashsim import compiled
from flashsim.errors import FlashsimError
from flashsim.units import format_bytes, format_time

from .loopskip import EVICTING_TOL
from .unitskip import UNIT_BOUND


def results_table(results, title: str):
    """One row per result; the profile and problem columns appear only when they vary."""
    from rich import box
    from rich.table import Table

    many_hw = len({r.hw for r in results}) > 1
    # the problem's fields that all rows share go in the title; a column shows the rest (v3-fp8's dtype is
    # in its name, so a tour that differs only there needs no column)
    words = [r.problem.describe().split() for r in results]
    shared = [w for w in words[0] if all(w in ws for ws in words)]
    varying = [" ".join(w for w in ws if w not in shared) for ws in words]
    common = max(varying, key=varying.count)  # ties go to the first row's value, run after run
    pairs = list(zip(results, varying, strict=True))
    named = all(v == common or (v == r.problem.dtype and r.algo.endswith(v)) for r, v in pairs)
    if named:
        shared += ([common] if common else []) + sorted({f"({r.algo}: {v})" for r, v in pairs if v != common})
        varying = [""] * len(results)
    if shared:
        title += " - " + " ".join(shared)
    label = "dtype" if all(v in ("fp16", "bf16", "fp32", "fp8") for v in varying) else "problem"
    many_problems = any(varying)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0),
                  pad_edge=False, caption=provenance_line(results), caption_justify="left")
    cols = ["algo"] + (["hw"] if many_hw else []) + ([label] if many_problems else [])
    cols += ["tiles", "time", "TFLOP/s", "HBM rd", "HBM wr", "L2 rd", "HBM bw", "bound", "/roof"]
    for col in cols:
        left = col in ("algo", "hw", "problem", "dtype", "tiles", "bound")
        table.add_column(col, justify="left" if left else "right", no_wrap=col != "problem")
    for r, v in zip(results, varying, strict=True):
        row = [r.algo] + ([r.hw] if many_hw else [])
        row += [v] if many_problems else []
        row += [
            f"{r.tiling.block_m}x{r.tiling.block_n}",
            format_time(r.time_s),
            f"{r.tflops:.0f}",
            format_bytes(r.bytes["hbm_read"]),
            format_bytes(r.bytes["hbm_write"]),
            format_bytes(r.bytes["l2_read"]),
            f"{100 * r.hbm_bandwidth_fraction:.0f}%",
            r.bound_by,
            f"{r.time_s / r.roofline_time_s:.2f}x",
        ]
        table.add_row(*row)
    return table


def provenance_line(results) -> str:
    """Where each profile's numbers come from: 'profile numbers: h100-sxm5-80gb derived (...)'."""
    from flashsim.hw_profiles.profile import describe_provenance

    seen = {r.hw: r.hw_provenance for r in results if r.hw_provenance}
    return "profile numbers: " + "; ".join(f"{hw} {describe_provenance(p)}" for hw, p in seen.items())


def _overrides_text(overrides: dict[str, str]) -> str:
    """'key=value, ...', with the SM clocks --clock sets alike shown once."""
    from flashsim.hw_profiles.commands import CLOCK_KEYS

    items = dict(overrides)
    clocks = {items.get(k) for k in CLOCK_KEYS}
    parts = []
    if len(clocks) == 1 and None not in clocks:
        parts.append(f"SM clock {float(clocks.pop()) / 1e9:.3g} GHz at any load")
        items = {k: v for k, v in items.items() if k not in CLOCK_KEYS}
    return ", ".join(parts + [f"{k}={v}" for k, v in items.items()])


# A kernel that keeps HBM and the tensor cores busy together draws the board to its power limit, and the clock
# falls below the one its tensor instructions get alone; the model leaves HBM out of the clock. Measured on the
# H200's per-tile development rows at 57-92% of HBM peak and 55-74% tensor busy: 6-10% below the model's clock in
# one call, more back to back (experiments/results/h200/session36/). Below half of HBM's peak the clocks matched.
POWER_CAVEAT_HBM = 0.5
POWER_CAVEAT_TENSOR = 0.4
# ... how far below the model's clock such kernels ran (session 36, long-K/V rows under Nsight Compute)
POWER_CAVEAT_SLOWER = (0.06, 0.10)


def clock_caveat(r) -> str:
    """What the clock the model runs a kernel at leaves out, where it matters (empty otherwise)."""
    hbm, tensor = r.utilization.get("hbm", 0.0), r.utilization.get("tensor", 0.0)
    if hbm < POWER_CAVEAT_HBM or tensor < POWER_CAVEAT_TENSOR:
        return ""
    low, high = POWER_CAVEAT_SLOWER
    span = ""
    time_s = getattr(r, "time_s", None)
    if time_s:
        # the time scales with the clock where the tensor cores bound it (HBM's bytes a second do not move)
        fast, slow = format_time(time_s / (1 - low)), format_time(time_s / (1 - high))
        span = f": at such a clock this run would take {fast}-{slow}"
    return (f"HBM {100 * hbm:.0f}% and tensor cores {100 * tensor:.0f}% busy together: power management lowers "
            "the clock with HBM traffic, which the model leaves out; such kernels measured "
            f"{100 * low:.0f}-{100 * high:.0f}% below the model's clock in single calls on an H200, lower still back "
            "to back (docs/MODEL.md, Not modelled)"
            f"{span}")


def detail_table(r, overrides: dict[str, str] | None = None):
    """One run's table; overrides: the profile parameters the command line changed (shown as such)."""
    from rich.table import Table

    table = Table(title=f"{r.algo} on {r.hw}: {r.problem.describe()}", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("profile numbers", r.hw_provenance)
    if overrides:
        table.add_row("overridden", _overrides_text(overrides))
    table.add_row("tiling", r.tiling.describe())
    table.add_row("time", f"{format_time(r.time_s)} ({r.cycles:,} cycles)")
    table.add_row("throughput", f"{r.tflops:.1f} TFLOP/s")
    if "pass_time_s" in r.sim:
        t, f = r.sim["pass_time_s"], r.sim["pass_tflops"]
        table.add_row("passes", f"fwd {format_time(t['fwd'])} ({f['fwd']:.0f} TFLOP/s) + "
                                f"bwd {format_time(t['bwd'])} ({f['bwd']:.0f} TFLOP/s)")
    if getattr(r, "pass_", "fwd") != "fwd":
        from .runner import FLOPS_NOTE

        table.add_row("FLOP count", FLOPS_NOTE)
    table.add_row("bound by", r.bound_by)
    table.add_row("HBM bandwidth", f"{100 * r.hbm_bandwidth_fraction:.0f}% of {format_bytes(r.hbm_peak_bytes_per_s)}/s")
    if r.padding:
        pad = r.padding
        table.add_row("padding avoided", f"{100 * pad['blocks_avoided']:.0f}% of thread blocks "
                                         f"({pad['blocks']:,} vs {pad['blocks_padded']:,} padded to the longest), "
                                         f"{100 * pad['gmem_bytes_avoided']:.0f}% of global-memory bytes, "
                                         f"{100 * pad['flops_avoided']:.0f}% of FLOPs")
    table.add_row(
        "roofline bound",
        f"{format_time(r.roofline_time_s)} "
        f"({max(r.roofline, key=r.roofline.get)}; simulated is {r.time_s / r.roofline_time_s:.2f}x)",
    )
    for key, value in r.bytes.items():
        table.add_row(key.replace("_", " "), format_bytes(value))
    for key, value in r.utilization.items():
        table.add_row(f"{key} busy", f"{100 * value:.0f}%")
    kernel_s = [k["cycles"] / k["clock_hz"] for k in r.kernels]
    for k, seconds in zip(r.kernels, kernel_s, strict=True):
        # a schedule of several launches (a pre-pass, a split-KV merge) says what each takes: their clocks differ
        share = f" ({100 * seconds / sum(kernel_s):.0f}% of the kernels)" if len(r.kernels) > 1 else ""
        table.add_row(
            f"kernel {k['name']}",
            f"{format_time(seconds)} at {k['clock_hz'] / 1e9:.2f} GHz{share}: {k['cycles']:,} cycles, "
            f"{k['ctas']:,} blocks ({k['ctas_simulated']:,} simulated)",
        )
    caveat = clock_caveat(r)
    if caveat:
        table.add_row("clock caveat", caveat)
    table.add_row(
        "simulation",
        f"{r.sim['wall_s']:.2f} s wall ({compiled.describe()}), {r.sim['ops']:,} tile ops, "
        f"{r.sim.get('events', 0):,} events, {r.sim['sms_simulated']} SMs"
        + (f" (run as {r.sim['fold']['sms_run']})" if r.sim.get("fold") else ""),
    )
    shortcuts = []
    sample = r.sim.get("sample")
    if sample:
        replay = sample.get("replay")
        replayed = (f" with the sample's block costs (spread {100 * replay['spread']:.1f}%), where the sample's own "
                    f"end gave {replay['sample_cycles']:,} cycles") if replay else ""
        shortcuts.append(f"head sample: {sample['describe']}{replayed}; such samples came within "
                         f"{100 * sample['bound']:.1f}% of --full on the FA2 grid (v2, v3 forward)")
    fold = r.sim.get("fold")
    if fold:
        shortcuts.append(f"fold (--fold): the sample's SMs are twins (equal blocks of one head in lockstep waves), so "
                         f"each {fold['twins']} of them run as one; equal to the run of each on 94 of 104 problems "
                         "measured, not all (docs/SPEED.md)")
    units = r.sim.get("unit_skip")
    if units:
        shortcuts.append(f"{units['units_left_out']} heads left out in {units['skips']} stretches (unit skip: the "
                         f"last two heads alike within {100 * units['worst']:.2f}%; came within "
                         f"{100 * UNIT_BOUND:.1f}% of the plain run)")
    if r.sim.get("blocks_extrapolated"):
        carried = r.sim.get("carried_skips")
        how = (f"; {carried} of {r.sim['periodic_skips']} periodic stretches of work tiles, watched where "
               "the persistent blocks take them" if carried else "")
        shortcuts.append(f"{r.sim['blocks_extrapolated']:,} blocks left out (periodic and unit skips{how})")
    skip = r.sim.get("loop_skip") or {}
    if skip.get("skips"):
        exact = "premise held" if not skip["mismatch_bytes"] else f"L2 off by {skip['mismatch_bytes']:,.0f} B"
        evicting = skip.get("evicting_skips")
        if evicting:
            exact += (f"; {evicting} of them in an evicting L2, within {100 * EVICTING_TOL:g}% of the watched "
                      "stretch's HBM bytes")
        drift = skip.get("drift_skips")
        if drift:
            exact = (f"{skip['skips'] - drift} whole stretches, {exact}; {drift} drift skips, each role at its own "
                     "rate: within 0.4% of the exact skips' cycles where measured; --no-drift-skip takes those only")
        shortcuts.append(f"{skip['ops_left_out']:,} tile ops in {skip['skips']} loop stretches left out "
                         f"(loop skip, {exact})")
    if "outer_steps_simulated" in r.sim:
        spread = r.sim.get("outer_step_spread", 0.0)
        settle = (f"the last three step costs within {100 * spread:.2f}% of each other, extended by their mean"
                  if spread else "step costs equal, exact")
        shortcuts.append(f"{r.sim['outer_steps']} V1 steps from loops of 1-{len(r.sim['outer_steps_simulated'])} "
                         f"({settle})")
    if shortcuts:
        table.add_row("shortcuts", "; ".join(shortcuts))
    return table


def out_path(directory: str | None, name: str) -> Path:
    """A file under the output directory (default ./flashsim-out), created on demand."""
    d = Path(directory or os.environ.get("FLASHSIM_OUT", "flashsim-out"))
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FlashsimError(f"cannot create the output directory {d}: {exc.strerror}") from None
    return d / name


def check_writable(path: str | Path) -> Path:
    """`path` as a file this process can create: checked before a long run, so it fails at once."""
    p = Path(path)
    parent = p.parent
    if p.is_dir():
        raise FlashsimError(f"cannot write {p}: it is a directory")
    if not parent.is_dir():
        raise FlashsimError(f"cannot write {p}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise FlashsimError(f"cannot write {p}: directory {parent} is not writable")
    return p


def write_atomically(path: str | Path, write: Callable[[IO[str]], None], newline: str | None = None) -> None:
    """Write through a temporary file renamed into place, so a failure never leaves half a file at `path`."""
    tmp = Path(f"{path}.tmp")
    try:
        with open(tmp, "w", newline=newline) as f:
            write(f)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise FlashsimError(f"cannot write {path}: {exc.strerror or exc}") from None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def problem_title(problems) -> str:
    """The problem of a set of runs in words, B H N d causal dtype; runs that differ only in dtype (v3-fp8)
    name theirs: "B=4 H=16 N=4096 d=128 bf16 (v3-fp8: fp8)"."""
    problems = list(problems)  # (algo, Problem) pairs
    shapes = list(dict.fromkeys(p.describe(dtype=False) for _, p in problems))
    dtypes = [p.dtype for _, p in problems]
    common = max(dtypes, key=dtypes.count)
    others = sorted({f"{a}: {p.dtype}" for a, p in problems if p.dtype != common})
    dtype = common + (f" ({', '.join(others)})" if others else "")
    return f"{'; '.join(shapes)}, {dtype}"


def _save(fig, path: Path) -> Path:
    """Save a figure through a temporary file, so a failed write leaves no half image at `path`."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp")
    try:
        fig.savefig(tmp, dpi=130, format=path.suffix.lstrip(".") or "png")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise FlashsimError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        _pyplot().close(fig)
    return path


def bar_chart(results, path: Path, title: str, skipped: list[dict] = ()) -> Path:
    return _save(bar_figure(results, title, skipped), path)


def bar_figure(results, title: str, skipped: list[dict] = ()):
    """Horizontal bars of simulated TFLOP/s, one per run, labelled with what bounds it; a skipped run keeps
    its row, with the reason in place of a bar."""
    plt = _pyplot()
    many_hw = len({r.hw for r in results} | {s["hw"] for s in skipped}) > 1
    rows = [(f"{r.algo} on {r.hw}" if many_hw else r.algo, r) for r in results]
    rows += [(f"{s['algo']} on {s['hw']}" if many_hw else s["algo"], s) for s in skipped]
    top = max(r.tflops for r in results)
    palette = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377")
    colors = {hw: palette[i % len(palette)] for i, hw in enumerate(dict.fromkeys(r.hw for r in results))}
    fig, ax = plt.subplots(figsize=(8, 1.0 + 0.45 * len(rows)))
    for y, (_, r) in enumerate(rows):
        if isinstance(r, dict):
            ax.text(0.01 * top, y, f"skipped: {r['reason']}", va="center", fontsize=7, style="italic",
                    color="#777777")
            continue
        ax.barh(y, r.tflops, color=colors[r.hw], height=0.6)
        ax.text(r.tflops + 0.01 * top, y, f"{r.tflops:.0f} ({r.bound_by})", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=9)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first run on top, as in the table; room for the skipped rows' text
    ax.set_xlim(0, top * 1.25)
    ax.set_xlabel("TFLOP/s (simulated; label: value and what bounds it)")
    ax.set_title(title, fontsize=9, loc="left")
    ax.grid(axis="x", alpha=0.3)
    return fig


def _peaks(profile, dtypes) -> dict[str, float]:
    """The profile's tensor-core peak TFLOP/s (its best instruction) for each dtype it has a rate for."""
    from flashsim.errors import ProfileError

    out = {}
    for dtype in sorted(dtypes):
        try:
            out[dtype] = profile.tensor_peak_flops_per_s(dtype) / 1e12
        except ProfileError:
            continue
    return out


def sweep_plot(rows: list[dict], path: Path, title: str, profile=None) -> Path:
    return _save(sweep_figure(rows, title, profile), path)


def sweep_figure(rows: list[dict], title: str, profile=None):
    """TFLOP/s against sequence length, one line per algorithm, one panel per (head dim, causal); y from 0,
    with the profile's tensor-core peak for each dtype as a dashed line."""
    plt = _pyplot()
    panels = sorted({(r["headdim"], r["causal"]) for r in rows})
    peaks = _peaks(profile, {r["dtype"] for r in rows}) if profile is not None else {}
    top = max([r["tflops"] for r in rows] + list(peaks.values()))
    seqlens = sorted({r["seqlen"] for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(max(6.0, 4.2 * len(panels)), 4.0), squeeze=False,
                             sharey=True, layout="constrained")
    for ax, (d, causal) in zip(axes[0], panels, strict=True):
        for algo in sorted({r["algo"] for r in rows}):
            pts = sorted(
                (r["seqlen"], r["tflops"])
                for r in rows
                if r["algo"] == algo and r["headdim"] == d and r["causal"] == causal and r["tflops"]
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=algo)
        for i, (dtype, peak) in enumerate(peaks.items()):
            ax.axhline(peak, color="#555555", linestyle=("--", ":")[i % 2], linewidth=1,
                       label=f"{dtype} tensor-core peak {peak:.0f}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(seqlens, [f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n) for n in seqlens])
        ax.minorticks_off()
        ax.set_ylim(0, top * 1.08)
        ax.set_xlabel("sequence length")
        ax.set_title(f"d={d}{' causal' if causal else ''}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("TFLOP/s")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    return fig
