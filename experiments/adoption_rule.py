"""Does a candidate model pass the adoption rule? The development sets' GPU busy time before and after.

A mechanism goes into the shipped profiles when the development sets say so, by a rule written down before they
are predicted with it (docs/MODEL.md; e.g. experiments/results/h200/session33/README.md):
- no (set, implementation) group's MAPE gets worse by more than --max-worse points (default 2);
- the row-weighted mean MAPE over all groups goes down.
This reads the development sets' committed reports (validation, devset-llm, devset-tiles, devset-d256) as they
were at git revision --before and as they are in --after (a directory: the working tree's results, or the
--out-dir a candidate was predicted into with `flashsim validate --compare-only --set KEY=VALUE`). It never reads
a test set: the rule must not look at them.

    python3 -m flashsim.experiments.adoption_rule --before HEAD [--after DIR] [--json]
prints the table and the verdict; exits 0 when the rule passes, 1 when it does not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from flashsim.errors import FlashsimError

from .accuracy import SIDE_BY_SIDE, load
from .validate_sets import DEV, DEV_D256, DEV_LLM, DEV_TILES

DEV_SETS = (DEV, DEV_LLM, DEV_TILES, DEV_D256)
RESULTS = Path("experiments") / "results" / "h200"


def groups(report: dict, name: str) -> dict[tuple[str, str], dict]:
    """(set, implementation) -> n and MAPE of GPU busy time."""
    out = {}
    for impl, s in report["summary"].items():
        c = s.get(SIDE_BY_SIDE) or {}
        if c.get("n"):
            out[name, impl] = {"n": c["n"], "mape": c["mape"]}
    return out


def at_revision(rev: str, path: Path) -> dict:
    """A committed report as it was at git revision `rev`."""
    try:
        text = subprocess.run(["git", "show", f"{rev}:{path.as_posix()}"], capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise FlashsimError(f"cannot read {path} at {rev}: {detail.strip().splitlines()[-1] if detail else exc}") \
            from None
    report = json.loads(text)
    if "summary" not in report:
        raise FlashsimError(f"{path} at {rev} is not a validation report")
    return report


def compare(before: dict, after: dict, max_worse: float = 2.0) -> dict:
    """The rule over two {(set, impl): {n, mape}}: every group both have, its change, and the verdict."""
    rows, missing = [], sorted(set(before) ^ set(after))
    for key in sorted(set(before) & set(after)):
        b, a = before[key], after[key]
        rows.append({"set": key[0], "impl": key[1], "n": a["n"], "before": b["mape"], "after": a["mape"],
                     "change": a["mape"] - b["mape"]})
    n = sum(r["n"] for r in rows)
    mean_before = sum(r["before"] * r["n"] for r in rows) / n if n else 0.0
    mean_after = sum(r["after"] * r["n"] for r in rows) / n if n else 0.0
    worst = max(rows, key=lambda r: r["change"], default=None)
    passes = bool(rows) and worst["change"] <= max_worse and mean_after < mean_before
    return {"rows": rows, "rows_total": n, "mean_before": mean_before, "mean_after": mean_after,
            "worst_change": worst["change"] if worst else None, "max_worse": max_worse, "passes": passes,
            "missing": [list(k) for k in missing]}


def render(result: dict) -> None:
    from flashsim.console import make_console
    from rich.table import Table

    table = Table(title="development sets, GPU busy time MAPE % (the test sets are not read)")
    for col in ("set", "implementation", "n", "before", "after", "change"):
        table.add_column(col, justify="left" if col in ("set", "implementation") else "right")
    for r in result["rows"]:
        worse = r["change"] > result["max_worse"]
        table.add_row(r["set"], r["impl"], str(r["n"]), f"{r['before']:.1f}", f"{r['after']:.1f}",
                      f"{r['change']:+.1f}", style="red" if worse else None)
    console = make_console()
    console.print(table)
    console.print(f"row-weighted mean over {result['rows_total']} rows: {result['mean_before']:.2f}% -> "
                  f"{result['mean_after']:.2f}%; the most a group got worse: {result['worst_change']:+.1f} points "
                  f"(at most {result['max_worse']:g})")
    if result["missing"]:
        console.print(f"groups in only one of the two: {', '.join('/'.join(k) for k in result['missing'])}")
    console.print("the rule passes" if result["passes"] else "the rule does not pass")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.adoption_rule", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, metavar="REV", help="git revision of the reports before")
    ap.add_argument("--after", default=str(RESULTS), metavar="DIR", help="directory of the reports after")
    ap.add_argument("--max-worse", type=float, default=2.0, metavar="POINTS")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        before, after = {}, {}
        for ds in DEV_SETS:
            before.update(groups(at_revision(args.before, RESULTS / ds.report), ds.name))
            after.update(groups(load(Path(args.after) / ds.report), ds.name))
    except FlashsimError as exc:
        print(f"adoption_rule: {exc}", file=sys.stderr)
        return 2
    return verdict(compare(before, after, args.max_worse), args.json)


def verdict(result: dict, as_json: bool) -> int:
    """Print the rule's result (a table, or JSON) and return the exit status: 0 passes, 1 does not."""
    if as_json:
        print(json.dumps(result, indent=1))
    else:
        render(result)
    return 0 if result["passes"] else 1


if __name__ == "__main__":
    sys.exit(main())
