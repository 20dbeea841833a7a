"""The adoption rule (experiments/adoption_rule.py) for a candidate that can move only some rows of the
development sets: predict those rows with the model before the candidate and with it, and judge every
(set, implementation) group with all other rows as their reports hold them, the same on both sides.

Which rows a candidate can move follows from what it changes (our v2's mask code: only our v2's causal rows at
the tiles whose mask is known; the v2 schedule's K/V order: our v2's and SDPA flash's rows). Predicting only
those takes minutes where the whole development sets take an hour of a many-CPU machine; the reports are
predicted again in full when the candidate lands. Like adoption_rule, it never reads a test set.

    python3 -m flashsim.experiments.partial_adoption predict --impls v2 [--causal | --plain] [--whole-chip]
            [--jobs 2] --out FILE
        run with the model to predict with on the import path (the candidate's tree, or the one before it);
        FILE: {"set|config id|implementation": GPU busy seconds}. --whole-chip simulates every SM rather than
        the default head sample: a candidate that moves the samples and the chip apart (a launch order that
        changes how a head's blocks are dealt) is judged on the chip; give both sides the flag
    python3 -m flashsim.experiments.partial_adoption rule --before FILE [FILE ...] --after FILE [FILE ...] [--json]
        later files win where two hold a row; exits 0 when the rule passes, 1 when not, 2 on bad input
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from flashsim.errors import FlashsimError
from flashsim.hw_profiles import load_profile

from .accuracy import SIDE_BY_SIDE, load
from .adoption_rule import DEV_SETS, RESULTS, compare, verdict


def _report(ds) -> dict:
    return load(RESULTS / ds.report)


def _key(ds, row: dict) -> str:
    return f"{ds.name}|{row['config_id']}|{row['impl']}"


def chosen_rows(impls: list[str], causal: bool | None, whole_chip: bool = False) -> list[tuple]:
    """(key, job args, last wall seconds) of the development sets' measured rows of `impls` (causal ones only,
    plain ones only, or both), the longest first; `whole_chip`: each job simulates the whole chip."""
    from .prediction_inputs import job_args, ran_tiling

    out = []
    for ds in DEV_SETS:
        report = _report(ds)
        flushed = report.get("l2_start", "flushed") != "empty"
        # each row's tiles as the tree's launch rules give them (a candidate may change a library's rule: the
        # report holds the rule of the model that wrote it)
        rows = [{**r, "tiling": ran_tiling(r)} for r in report["rows"] if r["impl"] in impls
                and (r.get("measured") or {}).get(SIDE_BY_SIDE)
                and (causal is None or bool(r["config"].get("causal")) == causal)]
        args, _ = job_args(rows, "h200", [], flushed)
        out += [(_key(ds, r), (*a, whole_chip), (r.get("sim") or {}).get("wall_s", 0))
                for r, a in zip(rows, args, strict=True)]
    return sorted(out, key=lambda x: -x[2])


def _predict_one(item: tuple) -> tuple[str, float | None]:
    """A row's GPU busy time as validation predicts it: the simulation's, plus what the library's call launches
    beside its kernels (validate_compare.add_call_work: cuDNN's memset)."""
    from .prediction_inputs import simulate_job
    from .validate_compare import add_call_work

    key, args, _ = item
    row = {"impl": key.rsplit("|", 1)[1], "algo": args[0], **simulate_job(args)}
    if "predicted" in row:
        add_call_work([row], load_profile(args[3], args[4]))
    return key, (row.get("predicted") or {}).get(SIDE_BY_SIDE)


def predict(impls: list[str], causal: bool | None, jobs: int, log=print,
            whole_chip: bool = False) -> dict[str, float | None]:
    items = chosen_rows(impls, causal, whole_chip)
    log(f"partial_adoption: predicting {len(items)} rows ({jobs} processes"
        f"{', whole chip' if whole_chip else ''})")
    with ProcessPoolExecutor(jobs) as pool:
        return dict(pool.map(_predict_one, items))


def groups(predicted: dict[str, float | None]) -> dict[tuple[str, str], dict]:
    """(set, implementation) -> n and MAPE % of GPU busy time, each row's prediction from `predicted` where it
    holds one, else the report's."""
    out = {}
    for ds in DEV_SETS:
        errors: dict[str, list[float]] = {}
        for row in _report(ds)["rows"]:
            measured = (row.get("measured") or {}).get(SIDE_BY_SIDE)
            # a row predicted anew, unless that prediction failed (None): then the report's
            mine = predicted.get(_key(ds, row)) or (row.get("predicted") or {}).get(SIDE_BY_SIDE)
            if measured and mine:
                errors.setdefault(row["impl"], []).append(abs(mine - measured) / measured)
        for impl, errs in errors.items():
            out[ds.name, impl] = {"n": len(errs), "mape": 100 * sum(errs) / len(errs)}
    return out


def _merged(paths: list[str]) -> dict:
    merged: dict = {}
    for path in paths:
        try:
            merged.update(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise FlashsimError(f"cannot read predictions {path}: {exc}") from None
    return merged


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.partial_adoption", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("predict")
    p.add_argument("--impls", nargs="+", required=True)
    mask = p.add_mutually_exclusive_group()
    mask.add_argument("--causal", action="store_const", const=True, dest="causal")
    mask.add_argument("--plain", action="store_const", const=False, dest="causal")
    p.add_argument("--whole-chip", action="store_true", help="simulate every SM, not the default head sample")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", required=True)
    r = sub.add_parser("rule")
    r.add_argument("--before", nargs="+", required=True)
    r.add_argument("--after", nargs="+", required=True)
    r.add_argument("--max-worse", type=float, default=2.0)
    r.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "predict":
            out = Path(args.out)
            if not out.parent.is_dir():
                raise FlashsimError(f"no directory for {out}")
            result = predict(args.impls, args.causal, max(1, args.jobs), whole_chip=args.whole_chip)
            out.write_text(json.dumps(result, indent=0, sort_keys=True) + "\n")
            return 0
        before, after = _merged(args.before), _merged(args.after)
        result = compare(groups(before), groups({**before, **after}), args.max_worse)
    except FlashsimError as exc:
        print(f"partial_adoption: {exc}", file=sys.stderr)
        return 2
    return verdict(result, args.json)


if __name__ == "__main__":
    sys.exit(main())
