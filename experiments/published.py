"""The h100 and a100 profiles against published FlashAttention throughput: every point the FA2 and FA3 papers
print for an A100 or an H100 SXM5 on their benchmark grid (and FA3's ablation table), the simulator's
prediction of it with the matching schedule, the error of each and the mean absolute percentage error.

These figures are a test set: no profile number or mechanism is set from them. Predictions are default runs
(`flashsim simulate` without --full).

    flashsim validate --published [--out-dir DIR] [--jobs N]

writes published.json, published.md and published.png to DIR (default experiments/results).
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from flashsim.algorithms.problem import Problem

SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
FA2_PAPER = "Dao 2023, FlashAttention-2 (arXiv 2307.08691)"
FA3_PAPER = "Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608)"
GRID = "batch 16k/seqlen, hidden 2048 (heads 2048/d)"
FLOPS_FWD = "forward FLOPs 4 B H N^2 d, halved for causal"
FLOPS_FWD_BWD = "fwd+bwd FLOPs 3.5x the forward's (backward 2.5x: 5 matmuls against 2), halved for causal"
DEFAULT_RUNS = "default runs (flashsim simulate without --full)"
# Bar labels read off the plot rather than printed (the FA2 paper's A100 figure leaves some bars unlabelled).
APPROX = "~"


@dataclass(frozen=True)
class Series:
    """One curve of a published figure: an implementation on one GPU at one head dim, over sequence lengths."""

    source: str  # paper, figure or table
    gpu: str
    hw: str  # the profile that stands for the GPU
    impl: str  # the published implementation
    algo: str  # the schedule simulated for it
    pass_: str
    headdim: int
    causal: bool
    tflops: tuple  # per SEQLENS entry: a number, or "~N" where the value is read off the plot
    dtype: str = "fp16"
    flops: str = FLOPS_FWD
    note: str = ""


@dataclass(frozen=True)
class Point:
    source: str
    gpu: str
    hw: str
    impl: str
    algo: str
    pass_: str
    dtype: str
    batch: int
    heads: int
    seqlen: int
    headdim: int
    causal: bool
    published_tflops: float
    approximate: bool
    flops: str
    options: dict = field(default_factory=dict)
    note: str = ""

    def problem(self) -> Problem:
        return Problem(self.batch, self.heads, self.seqlen, self.headdim, causal=self.causal, dtype=self.dtype)

    def label(self) -> str:
        mask = " causal" if self.causal else ""
        opts = "".join(f" no-{k.replace('_', '-')}" for k, v in self.options.items() if not v)
        return f"{self.impl} {self.pass_} d{self.headdim}{mask} N={self.seqlen}{opts}"


_FA2_A100 = dict(source=f"{FA2_PAPER}, Figure 4 (forward + backward, A100)", gpu="A100 SXM4 80GB", hw="a100",
                 impl="FlashAttention-2", algo="v2", pass_="fwd+bwd", flops=FLOPS_FWD_BWD)
_FA2_H100 = dict(source=f"{FA2_PAPER}, Figure 7 (forward + backward, H100)", gpu="H100 SXM5 80GB", hw="h100",
                 impl="FlashAttention-2", algo="v2", pass_="fwd+bwd", flops=FLOPS_FWD_BWD)
_FA3_FWD = dict(source=f"{FA3_PAPER}, Figure 5 (forward, FP16/BF16, H100)", gpu="H100 SXM5 80GB", hw="h100",
                pass_="fwd")
_FA3 = dict(_FA3_FWD, impl="FlashAttention-3", algo="v3")
_FA2_IN_FA3 = dict(_FA3_FWD, impl="FlashAttention-2", algo="v2",
                   note="FA2's bars in FA3's figure; values between the end points are the figure's bar labels")

SERIES = (
    Series(**_FA2_A100, headdim=64, causal=False, tflops=(132, "~153", 162, 171, 175, 176)),
    Series(**_FA2_A100, headdim=128, causal=False, tflops=("~150", "~173", 187, 196, 201, 203)),
    Series(**_FA2_A100, headdim=64, causal=True, tflops=(88, 119, 140, 156, 165, 171)),
    Series(**_FA2_A100, headdim=128, causal=True, tflops=(99, 133, 155, 173, 182, 189)),
    Series(**_FA2_H100, headdim=64, causal=False, tflops=(215, 254, 274, 288, 294, 296)),
    Series(**_FA2_H100, headdim=128, causal=False, tflops=(248, 294, 320, 326, 335, 338)),
    Series(**_FA3, headdim=64, causal=False, tflops=(333, 392, 460, 476, 496, 497)),
    Series(**_FA3, headdim=64, causal=True, tflops=(197, 265, 371, 420, 460, 473)),
    Series(**_FA3, headdim=128, causal=False, tflops=(467, 565, 625, 638, 646, 648)),
    Series(**_FA3, headdim=128, causal=True, tflops=(292, 423, 521, 579, 602, 616)),
    Series(**_FA3, headdim=256, causal=False, tflops=(482, "~620", 707, 736, 746, 756)),
    Series(**_FA3, headdim=256, causal=True, tflops=(286, 427, 537, 612, 628, 642)),
    Series(**_FA2_IN_FA3, headdim=64, causal=False, tflops=(282, 306, 318, 321, 322, 324)),
    Series(**_FA2_IN_FA3, headdim=64, causal=True, tflops=(180, 229, 262, 284, 295, 299)),
    Series(**_FA2_IN_FA3, headdim=128, causal=False, tflops=(309, 350, 362, 368, 370, 370)),
    Series(**_FA2_IN_FA3, headdim=128, causal=True, tflops=(191, 260, 298, 319, 333, 335)),
    Series(**_FA2_IN_FA3, headdim=256, causal=False, tflops=(275, 313, 321, 323, 324, 326)),
    Series(**_FA2_IN_FA3, headdim=256, causal=True, tflops=(208, 251, 278, 293, 297, 298)),
)

# FA3's Table 2 (pipelining ablation): batch 4, 16 heads, seqlen 8448, d128, non-causal, H100 SXM5.
_TABLE2 = dict(source=f"{FA3_PAPER}, Table 2 (ablation, H100)", gpu="H100 SXM5 80GB", hw="h100",
               impl="FlashAttention-3", algo="v3", pass_="fwd", dtype="fp16", batch=4, heads=16, seqlen=8448,
               headdim=128, causal=False, approximate=False, flops=FLOPS_FWD)
TABLE2 = (
    Point(**_TABLE2, published_tflops=661.0),
    Point(**_TABLE2, published_tflops=582.0, options={"intra_overlap": False},
          note="without intra-warpgroup overlap (FA3's 2-stage pipelining)"),
    Point(**_TABLE2, published_tflops=570.0, options={"warp_specialization": False},
          note="without warp specialisation"),
)


def points() -> list[Point]:
    """Every published point, the grid's series first, then Table 2."""
    out = []
    for s in SERIES:
        for n, value in zip(SEQLENS, s.tflops, strict=True):
            approx = isinstance(value, str)
            out.append(Point(source=f"{s.source}; {GRID}", gpu=s.gpu, hw=s.hw, impl=s.impl, algo=s.algo,
                             pass_=s.pass_, dtype=s.dtype, batch=16384 // n, heads=2048 // s.headdim, seqlen=n,
                             headdim=s.headdim, causal=s.causal,
                             published_tflops=float(value.lstrip(APPROX)) if approx else float(value),
                             approximate=approx, flops=s.flops, note=s.note))
    return out + list(TABLE2)


def predict(point: Point) -> dict:
    """The simulator's default run of the point's schedule and pass on the point's profile."""
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator.runner import simulate_pass

    profile = load_profile(point.hw)
    r = simulate_pass(point.algo, point.problem(), profile, point.pass_, options=dict(point.options))
    return {"tflops": r.tflops, "time_s": r.time_s, "profile": profile.name, "provenance": profile.provenance,
            "bound_by": r.bound_by, "sms_simulated": r.sim["sms_simulated"]}


def error(predicted: float, published: float) -> float:
    """Signed relative error of a prediction: positive when the simulator predicts more TFLOP/s."""
    return predicted / published - 1


def mape(rows: list[dict]) -> float:
    return sum(abs(r["error"]) for r in rows) / len(rows) if rows else float("nan")


def summarise(rows: list[dict]) -> dict:
    """MAPE overall, per profile and per published series (source, implementation, pass)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(f"{r['hw']}: {r['impl']} {r['pass']} ({r['source'].split(';')[0]})", []).append(r)
    by_hw: dict[str, list[dict]] = {}
    for r in rows:
        by_hw.setdefault(r["hw"], []).append(r)
    return {
        "points": len(rows),
        "mape": mape(rows),
        "mape_printed_values_only": mape([r for r in rows if not r["approximate"]]),
        "max_abs_error": max(abs(r["error"]) for r in rows),
        "bias": sum(r["error"] for r in rows) / len(rows),
        "by_hw": {hw: {"points": len(rs), "mape": mape(rs)} for hw, rs in by_hw.items()},
        "by_series": {k: {"points": len(rs), "mape": mape(rs), "bias": sum(r["error"] for r in rs) / len(rs)}
                      for k, rs in groups.items()},
    }


def compare(jobs: int = 1, log=sys.stderr) -> dict:
    """Predict every published point; the rows (point, prediction, error) and their summary."""
    pts = points()
    predictions: list = [None] * len(pts)
    with ProcessPoolExecutor(max(1, jobs)) as pool:
        # the longest runs first, so that parallel workers finish together
        order = sorted(range(len(pts)), key=lambda i: -pts[i].problem().flops(pts[i].pass_))
        futures = {pool.submit(predict, pts[i]): i for i in order}
        for done in as_completed(futures):
            i = futures[done]
            predictions[i] = done.result()
            if log is not None:
                print(f"{pts[i].hw} {pts[i].label()}: {predictions[i]['tflops']:.0f} TFLOP/s "
                      f"(published {pts[i].published_tflops:.0f})", file=log, flush=True)
    rows = []
    for p, pred in zip(pts, predictions, strict=True):
        row = asdict(p)
        row["pass"] = row.pop("pass_")
        row.update(predicted_tflops=pred["tflops"], error=error(pred["tflops"], p.published_tflops),
                   profile=pred["profile"], provenance=pred["provenance"], bound_by=pred["bound_by"],
                   sms_simulated=pred["sms_simulated"])
        rows.append(row)
    return {"summary": summarise(rows), "predicted_with": DEFAULT_RUNS, "rows": rows}


def markdown(result: dict) -> str:
    s = result["summary"]
    lines = [
        "# Predictions against published FlashAttention throughput (A100, H100)",
        "",
        "Written by `flashsim validate --published` (experiments/published.py). Published figures are a test set:",
        "no profile number or mechanism was set from them.",
        f"Predictions: {result.get('predicted_with', DEFAULT_RUNS)}.",
        f"FLOPs: {FLOPS_FWD}; {FLOPS_FWD_BWD}. `~`: value read off the plot, not printed.",
        "",
        f"**MAPE {s['mape']:.1%}** over {s['points']} points (printed values only: "
        f"{s['mape_printed_values_only']:.1%}); worst {s['max_abs_error']:.1%}; mean signed error "
        f"{s['bias']:+.1%} (positive: predicted faster than published).",
        "",
        "| series | points | MAPE | mean signed error |",
        "|---|---|---|---|",
    ]
    lines += [f"| {k} | {v['points']} | {v['mape']:.1%} | {v['bias']:+.1%} |" for k, v in s["by_series"].items()]
    if result.get("findings"):
        lines += ["", "Where the errors come from (investigated, nothing tuned):", ""]
        lines += [f"- {f}" for f in result["findings"]]
    lines += ["", "| profile (numbers) | implementation -> schedule | pass | d | causal | N | B x H | published | "
              "predicted | error | source |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        opts = "".join(f", no {k.replace('_', ' ')}" for k, v in r["options"].items() if not v)
        pub = f"{APPROX if r['approximate'] else ''}{r['published_tflops']:.0f}"
        lines.append(f"| {r['profile']} ({r['provenance']}) | {r['impl']} -> {r['algo']}{opts} | {r['pass']} | "
                     f"{r['headdim']} | {'yes' if r['causal'] else 'no'} | {r['seqlen']} | {r['batch']} x "
                     f"{r['heads']} | {pub} | {r['predicted_tflops']:.0f} | {r['error']:+.1%} | "
                     f"{r['source'].split(';')[0]} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 6.5))
    series: dict[str, list[dict]] = {}
    for r in result["rows"]:
        series.setdefault(f"{r['hw']} {r['impl'].replace('FlashAttention-', 'FA')} {r['pass']}", []).append(r)
    for label, rs in series.items():
        ax.scatter([r["published_tflops"] for r in rs], [r["predicted_tflops"] for r in rs], s=18, label=label)
    top = 1.08 * max(max(r["published_tflops"], r["predicted_tflops"]) for r in result["rows"])
    ax.plot([0, top], [0, top], color="black", lw=0.8)
    ax.fill_between([0, top], [0, 0.88 * top], [0, 1.12 * top], color="grey", alpha=0.15, label="within 12%")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("published TFLOP/s (FA2 paper Fig. 4, 7; FA3 paper Fig. 5, Table 2)")
    ax.set_ylabel("simulated TFLOP/s (default run)")
    ax.set_title(f"a100 and h100 profiles vs published: MAPE {result['summary']['mape']:.1%}")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(result: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "published.json", out_dir / "published.md", out_dir / "published.png"]
    paths[0].write_text(json.dumps(result, indent=1) + "\n")
    paths[1].write_text(markdown(result))
    plot(result, paths[2])
    return paths


def main(out_dir: Path, jobs: int = 1) -> int:
    result = compare(jobs)
    paths = write(result, out_dir)
    s = result["summary"]
    print(f"{s['points']} published points: MAPE {s['mape']:.1%}, worst {s['max_abs_error']:.1%}, "
          f"mean signed error {s['bias']:+.1%}")
    for k, v in s["by_series"].items():
        print(f"  {k}: MAPE {v['mape']:.1%} ({v['points']} points, mean {v['bias']:+.1%})")
    print("written: " + ", ".join(str(p) for p in paths))
    return 0
