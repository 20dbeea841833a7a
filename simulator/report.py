"""Rendering simulation results: terminal tables and plots (rich and matplotlib imported on use)."""

from __future__ import annotations

import os
from pathlib import Path

UNITS = ("B", "KB", "MB", "GB", "TB")


def human_bytes(n: float) -> str:
    for unit in UNITS:
        if abs(n) < 1000 or unit == UNITS[-1]:
            return f"{n:.3g} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1000
    return f"{n:.3g} TB"


def human_time(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


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
                  pad_edge=False)
    cols = ["algo"] + (["hw"] if many_hw else []) + ([label] if many_problems else [])
    cols += ["tiles", "time", "TFLOP/s", "HBM rd", "HBM wr", "L2 rd", "bound", "/roof"]
    for col in cols:
        left = col in ("algo", "hw", "problem", "dtype", "tiles", "bound")
        table.add_column(col, justify="left" if left else "right", no_wrap=col != "problem")
    for r, v in zip(results, varying, strict=True):
        row = [r.algo] + ([r.hw] if many_hw else [])
        row += [v] if many_problems else []
        row += [
            f"{r.tiling.block_m}x{r.tiling.block_n}",
            human_time(r.time_s),
            f"{r.tflops:.0f}",
            human_bytes(r.bytes["hbm_read"]),
            human_bytes(r.bytes["hbm_write"]),
            human_bytes(r.bytes["l2_read"]),
            r.bound_by,
            f"{r.time_s / r.roofline_time_s:.2f}x",
        ]
        table.add_row(*row)
    return table


def detail_table(r):
    from rich.table import Table

    table = Table(title=f"{r.algo} on {r.hw}: {r.problem.describe()}", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("tiling", r.tiling.describe())
    table.add_row("time", f"{human_time(r.time_s)} ({r.cycles:,} cycles)")
    table.add_row("throughput", f"{r.tflops:.1f} TFLOP/s")
    if "pass_time_s" in r.sim:
        t, f = r.sim["pass_time_s"], r.sim["pass_tflops"]
        table.add_row("passes", f"fwd {human_time(t['fwd'])} ({f['fwd']:.0f} TFLOP/s) + "
                                f"bwd {human_time(t['bwd'])} ({f['bwd']:.0f} TFLOP/s)")
    if getattr(r, "pass_", "fwd") != "fwd":
        from .passes import FLOPS_NOTE

        table.add_row("FLOP count", FLOPS_NOTE)
    table.add_row("bound by", r.bound_by)
    table.add_row(
        "roofline bound",
        f"{human_time(r.roofline_time_s)} "
        f"({max(r.roofline, key=r.roofline.get)}; simulated is {r.time_s / r.roofline_time_s:.2f}x)",
    )
    for key, value in r.bytes.items():
        table.add_row(key.replace("_", " "), human_bytes(value))
    for key, value in r.utilization.items():
        table.add_row(f"{key} busy", f"{100 * value:.0f}%")
    for k in r.kernels:
        table.add_row(
            f"kernel {k['name']}", f"{k['cycles']:,} cycles, {k['ctas']} blocks ({k['ctas_simulated']} simulated)"
        )
    table.add_row(
        "simulation",
        f"{r.sim['wall_s']:.2f} s wall, {r.sim['ops']:,} tile ops, {r.sim.get('events', 0):,} events, "
        f"{r.sim['sms_simulated']} SMs",
    )
    shortcuts = []
    if r.sim.get("blocks_extrapolated"):
        shortcuts.append(f"{r.sim['blocks_extrapolated']:,} blocks left out (periodic skip)")
    if "outer_steps_simulated" in r.sim:
        shortcuts.append(f"{r.sim['outer_steps']} V1 steps from loops of 1-{len(r.sim['outer_steps_simulated'])}")
    if shortcuts:
        table.add_row("shortcuts", "; ".join(shortcuts))
    return table


def out_path(directory: str | None, name: str) -> Path:
    """A file under the output directory (default ./flashsim-out), created on demand."""
    d = Path(directory or os.environ.get("FLASHSIM_OUT", "flashsim-out"))
    d.mkdir(parents=True, exist_ok=True)
    return d / name


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_chart(results, path: Path, title: str) -> Path:
    plt = _pyplot()
    labels = [f"{r.algo}\n{r.hw}" if len({x.hw for x in results}) > 1 else r.algo for r in results]
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(results)), 3.6))
    bars = ax.bar(labels, [r.tflops for r in results], color="#4477aa")
    for bar, r in zip(bars, results, strict=True):
        ax.annotate(
            r.bound_by, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8
        )
    ax.set_ylabel("TFLOP/s (simulated)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def sweep_plot(rows: list[dict], path: Path, title: str) -> Path:
    """TFLOP/s against sequence length, one line per algorithm, one panel per (head dim, causal)."""
    plt = _pyplot()
    panels = sorted({(r["headdim"], r["causal"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (d, causal) in zip(axes[0], panels, strict=True):
        for algo in sorted({r["algo"] for r in rows}):
            pts = sorted(
                (r["seqlen"], r["tflops"])
                for r in rows
                if r["algo"] == algo and r["headdim"] == d and r["causal"] == causal and r["tflops"]
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=algo)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"d={d}{' causal' if causal else ''}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
