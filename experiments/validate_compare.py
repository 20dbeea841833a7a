"""Predictions for validate's measurements, their errors, and the report files.

Reads one set's measurements (validation-measured.jsonl for the development set, testset-measured.jsonl for
the test set: validate_sets.py), runs simulator.simulate for every measured (implementation, configuration)
with the algorithm, dtype and tiling the measurement names, and writes <stem>.json (every row, and MAPE /
max error / bias per implementation and quantity), <stem>.md (the same as tables) and <stem>.png
(predicted against measured), stem "validation" or "testset". Needs no GPU. Predictions already in the
report for the same profile and the same model sources are reused, so a rerun after a resumed sweep
simulates only the new rows, and any change to the model predicts everything again.

Every measured call starts after validate's L2 flush (make_flush: a large write), so by default each
prediction starts from the full, partly dirty L2 that flush leaves (simulate(flushed_l2=True)) and pays the
write-backs of the dirty lines its reads evict; flushed_l2=False (`--empty-l2`) starts from an empty L2. The
report records which (`l2_start`). Byte counts come from Nsight Compute, which flushes and invalidates the
caches itself before each kernel it profiles (its default cache control): a row with measured bytes is
simulated once more from an empty L2 for them.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import math
import os
import tokenize
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from flashsim.errors import FlashsimError

from . import validate_store as store
from .model_sources import INPUT_SOURCES, MODEL_SOURCES, PRESENTATION, model_source_paths  # noqa: F401
from .prediction_inputs import BYTES, SIM_SWAPS, rows_from
from .prediction_inputs import job_args as _job_args
from .prediction_inputs import problem_args as _problem_args
from .prediction_inputs import simulate_job as _simulate
from .validate_metrics import summarize, summarize_groups
from .validate_sets import DEV, DataSet

JSON_NAME = DEV.report
# Quantity -> (label, short label for plots, unit, scale for display). Both times are compared with the
# simulated time (the GPU busy time with the simulated launch overheads left out); l2_bytes compares ncu's
# lts__t_bytes with the simulated L2 reads + writes.
QUANTITIES = {
    "time_s": ("time (CUDA events around the call)", "time, events", "ms", 1e3),
    "kernel_time_s": ("GPU busy time (profiler, launch gaps excluded)", "GPU busy time", "ms", 1e3),
    "hbm_read": ("HBM read", "HBM read", "MB", 1e-6),
    "hbm_write": ("HBM write", "HBM write", "MB", 1e-6),
    "l2_bytes": ("L2 read + write", "L2 read + write", "MB", 1e-6),
}

# The simulated L2 at each call's start, by simulate's flushed_l2 (recorded in the report).
L2_STARTS = {True: "flushed", False: "empty"}


def profile_fingerprint(profile, simulation: bool = False) -> str:
    """A hash of the profile's numbers (simulation: of those a simulation reads, less CALL_PARAMS)."""
    params = {k: v for k, v in profile.params.items() if not (simulation and k in CALL_PARAMS)}
    text = json.dumps({"name": profile.name, "params": params, "swaps": SIM_SWAPS}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# The model's part that no simulation runs: what a library's call puts on the GPU beside the simulated kernels
# (simulator/calls.py), added to each simulation's time when a report is made, and the profile numbers only it
# reads. A change to them re-assembles every report from the simulations it holds, in seconds; what holds
# simulations alone (journals, the shortcut table) carries the simulation fingerprint, a report both.
CALL_SOURCES = frozenset({"simulator/calls.py"})
CALL_PARAMS = frozenset({"memset_busy_s"})
PROFILE_SOURCE = "hw_profiles/profile.py"  # where each parameter is declared (a field a line)


def model_fingerprint(root: Path | None = None) -> str:
    """A hash of the model's Python sources (schedules, interpreters, simulator, profile loader; not their
    PRESENTATION modules) and of the experiments' modules that make its inputs from a measurement
    (INPUT_SOURCES); not of how reports are made, which predicts nothing."""
    return _fingerprint(root, frozenset())


def simulation_fingerprint(root: Path | None = None) -> str:
    """model_fingerprint less the CALL_SOURCES and the profile's declarations of the CALL_PARAMS: the code a
    simulation runs (what a journal and the shortcut table depend on)."""
    return _fingerprint(root, CALL_SOURCES, CALL_PARAMS)


def _fingerprint(root: Path | None, leave_out: frozenset, params_out: frozenset = frozenset()) -> str:
    root = root or Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in model_source_paths(root, leave_out):
        rel = path.relative_to(root).as_posix()
        code = code_of(path.read_bytes())
        if rel == PROFILE_SOURCE and params_out:
            code = b"\n".join(line for line in code.split(b"\n")
                              if line.split(b":")[0].strip().decode(errors="replace") not in params_out)
        h.update(rel.encode())
        h.update(code)
    return h.hexdigest()[:16]


def code_of(source: bytes) -> bytes:
    """A module's source less its comments, docstrings and blank lines, so that a change to what the code says
    of itself stales no prediction. Comments are the tokenizer's and docstrings the syntax tree's, both located
    by position in the text, which is what is hashed: the same on every Python version (their token streams and
    tree dumps differ). Source that does not parse is hashed whole."""
    text = source.decode("utf-8", errors="surrogateescape")
    lines = text.splitlines(keepends=True)
    try:
        tree = ast.parse(text)
        comments = [(t.start, t.end) for t in tokenize.generate_tokens(io.StringIO(text).readline)
                    if t.type == tokenize.COMMENT]
    except (SyntaxError, tokenize.TokenError, ValueError):
        return source
    def chars(row: int, byte_col: int) -> tuple[int, int]:  # the tree counts columns in UTF-8 bytes
        return row, len(lines[row - 1].encode("utf-8", errors="surrogateescape")[:byte_col].decode(errors="replace"))

    docstrings = [(chars(doc.lineno, doc.col_offset), chars(doc.end_lineno, doc.end_col_offset))
                  for doc in _docstrings(tree)]
    starts = [0]  # offset of each line's first character (lines count from 1, columns in characters)
    for line in lines:
        starts.append(starts[-1] + len(line))
    cut = sorted((starts[a[0] - 1] + a[1], starts[b[0] - 1] + b[1]) for a, b in comments + docstrings)
    kept, at = [], 0
    for lo, hi in cut:
        kept.append(text[at:max(at, lo)])
        at = max(at, hi)
    kept.append(text[at:])
    code = "\n".join(line.rstrip() for line in "".join(kept).splitlines() if line.strip())
    return code.encode("utf-8", errors="surrogateescape")


def _docstrings(tree: ast.AST) -> list[ast.expr]:
    """The docstring expressions of a module and of its classes and functions."""
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [node.body[0].value for node in ast.walk(tree) if isinstance(node, owners) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
            and isinstance(node.body[0].value.value, str)]


def _pending(rows: list[dict], hw: str, overrides: list[str], cached: dict, journal: Journal | None,
             flushed_l2: bool) -> tuple[list[dict], tuple, list, dict]:
    """(the rows to predict, after filling those the cached report holds; their (job args, byte job args); the
    simulations they need that the journal lacks, largest first; the journal's results by job key)."""
    todo = []
    for row in rows:
        if not row["measured"]:
            continue
        hit = cached.get(_cache_key(row))
        if hit is not None:
            row.update(hit)
            continue
        todo.append(row)
    if not todo:
        return todo, ([], {}), [], {}
    job_args, byte_args = _job_args(todo, hw, overrides, flushed_l2)
    # Implementations that the model runs as the same schedule on the same tiles share one simulation; the
    # largest problems start first, so the last process to finish is not the one that drew the longest run.
    unique = sorted({json.dumps(a, sort_keys=True): a for a in [*job_args, *byte_args.values()]}.values(), key=_work,
                    reverse=True)  # fmt: skip
    by_args = journal.done() if journal else {}
    return todo, (job_args, byte_args), [a for a in unique if json.dumps(a, sort_keys=True) not in by_args], by_args


def predict(rows: list[dict], hw: str, overrides: list[str], jobs: int, cached: dict, log=print,
            journal: Journal | None = None, flushed_l2: bool = True, select=None) -> bool:
    """Fill row["predicted"] (or row["predict_error"]) for every row with a measurement. Each simulation is
    written to the journal as it finishes, so an interrupted comparison resumes where it stopped. flushed_l2:
    each run starts from the L2 validate's flush leaves (else from an empty one). select: run only the
    simulations (job args) it accepts, into the journal, and fill no row. Returns whether the rows are filled."""
    todo, (job_args, byte_args), pending, by_args = _pending(rows, hw, overrides, cached, journal, flushed_l2)
    if not todo:
        return True
    unique = len({json.dumps(a, sort_keys=True) for a in [*job_args, *byte_args.values()]})
    resumed = f", {unique - len(pending)} resumed from an interrupted run" if len(pending) < unique else ""
    if select is not None:
        chosen = [a for a in pending if select(a)]
        resumed += f"; this share: {len(chosen)} of them, into the journal"
        pending = chosen
    log(f"validate: simulating {len(pending)} configurations for {len(todo)} measurements ({jobs} processes{resumed})")
    for args, res in _run_all(pending, jobs):
        key = json.dumps(args, sort_keys=True)
        by_args[key] = res
        if journal:
            journal.add(key, res)
    if select is not None:
        return False
    for i, (row, args) in enumerate(zip(todo, job_args, strict=True)):
        row.update(by_args[json.dumps(args, sort_keys=True)])
        empty = by_args[json.dumps(byte_args[i], sort_keys=True)] if i in byte_args else {}
        if "predicted" in row and "predicted" in empty:
            row["predicted"] = {**row["predicted"], **{q: empty["predicted"][q] for q in BYTES}}
    return True


# --share: a set's simulations split by the wall time each took for its last report, so that the light ones run
# on a machine of many CPUs (each command limited in time) and the heavy ones where a run may take longer.
SHARES = ("light", "heavy")


def last_walls(report: Path) -> dict[str, float]:
    """(algorithm, problem) as JSON -> the wall time its simulation took for `report` (a set's last report)."""
    walls: dict = {}
    if report.is_file():
        try:
            rows = json.loads(report.read_text()).get("rows", [])
        except json.JSONDecodeError:
            rows = []
        for r in rows:
            wall = (r.get("sim") or {}).get("wall_s")
            if wall is not None:
                key = json.dumps([r["algo"], _problem_args(r["config"], r.get("sim_headdim"))], sort_keys=True)
                walls[key] = max(walls.get(key, 0.0), wall)
    return walls


def _wall_key(args: tuple) -> str:
    return json.dumps([args[0], args[1]], sort_keys=True)


def share_filter(report: Path, share: str, heavy_above_s: float):
    """Job args -> whether the simulation is in `share`: heavy if it took over heavy_above_s for `report`
    (the set's last report), light otherwise (and where the report has no such simulation)."""
    walls = last_walls(report)

    def heavy(args: tuple) -> bool:
        return walls.get(_wall_key(args), 0.0) > heavy_above_s

    return heavy if share == "heavy" else (lambda args: not heavy(args))


def journal_sets(out_dir: Path, sets, hw: str = "h200", overrides: list[str] | None = None, jobs: int = 0,
                 log=print, flushed_l2: bool = True, o_store: str = "", share: str = "",
                 heavy_above_s: float = 300.0) -> int:  # fmt: skip
    """Every set's simulations not yet in its journal (of `share` only, if given) in one pool of processes,
    the longest first by the wall time each took for its set's last report (those it lacks before them), each
    written to its set's journal as it finishes; a simulation two sets share runs once. One pool keeps every
    process busy to the end, where sets run one after another leave processes idle at each set's tail.
    Returns how many simulations ran; a later comparison writes each report from its journal."""
    from flashsim.hw_profiles import load_profile

    profile = load_profile(hw, overrides or [])
    fingerprint = profile_fingerprint(profile, simulation=True)
    jobs = jobs or max(1, min(8, (os.cpu_count() or 1)))
    wanted: dict[str, tuple] = {}  # job key -> job args
    journals: dict[str, list[Journal]] = {}  # job key -> the journals that want it
    walls: dict[str, float] = {}
    for data_set in sets:
        measured = out_dir / data_set.measured
        if not measured.is_file():
            continue
        rows = rows_from(store.load(measured), o_store)
        json_path = out_dir / data_set.report
        journal = Journal.of_set(out_dir, data_set, fingerprint)
        select = share_filter(json_path, share, heavy_above_s) if share else (lambda _: True)
        pending = _pending(rows, hw, overrides or [], _cached(json_path, fingerprint, L2_STARTS[flushed_l2]),
                           journal, flushed_l2)[2]
        set_walls = last_walls(json_path)
        for args in pending:
            if not select(args):
                continue
            key = json.dumps(args, sort_keys=True)
            wanted[key] = args
            journals.setdefault(key, []).append(journal)
            walls[key] = max(walls.get(key, 0.0), set_walls.get(_wall_key(args), math.inf))
    order = sorted(wanted, key=lambda k: (walls[k], _work(wanted[k])), reverse=True)
    log(f"validate: simulating {len(order)} configurations of {len(sets)} sets into their journals ({jobs} processes)")
    for args, res in _run_all([wanted[k] for k in order], jobs):
        key = json.dumps(args, sort_keys=True)
        for journal in journals[key]:
            journal.add(key, res)
    return len(order)


def _run_all(jobs_args: list, jobs: int):
    """Yield (job args, result) as simulations finish."""
    if jobs > 1 and len(jobs_args) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_simulate, a): a for a in jobs_args}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
    else:
        for a in jobs_args:
            yield a, _simulate(a)


class Journal:
    """Simulations finished by a comparison still running (or interrupted), one JSON line each, valid only for
    the profile numbers and simulation code that made them (fingerprint: profile_fingerprint(simulation=True));
    the finished report replaces it."""

    def __init__(self, path: Path, fingerprint: str):
        self.path, self.stamp = path, {"profile": fingerprint, "model": simulation_fingerprint()}

    @classmethod
    def of_set(cls, out_dir: Path, data_set: DataSet, fingerprint: str) -> Journal:
        """The set's journal: .<stem>-predictions.jsonl beside its measurements."""
        return cls(out_dir / f".{data_set.stem}-predictions.jsonl", fingerprint)

    def done(self) -> dict:
        out = {}
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short when the run was killed
                if rec.get("stamp") == self.stamp:
                    out[rec["job"]] = rec["result"]
        return out

    def add(self, key: str, result: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({"stamp": self.stamp, "job": key, "result": result}) + "\n")

    def close(self) -> None:
        self.path.unlink(missing_ok=True)


def _work(job_args: tuple) -> float:
    """A simulation's rough size: the score tiles a run visits (causal about half)."""
    cfg = job_args[1]
    nq, nk = cfg["seqlen_q"], cfg.get("seqlen_k") or cfg["seqlen_q"]
    return cfg["batch"] * cfg["heads"] * nq * nk * cfg["headdim"] / (2 if cfg.get("causal") else 1)


def _cached(path: Path, fingerprint: str, l2_start: str) -> dict:
    """(impl, config_id, tiling) -> the simulation's prediction fields from an earlier report whose simulations
    ran with the same profile numbers (fingerprint: profile_fingerprint(simulation=True)), simulation code and L2
    start (a kernel re-measured with other tiles is predicted again). Its call work (simulator/calls.py) is taken
    off: the report being made adds its own. A report from before the two fingerprints were told apart carries
    only the model's, which then covered the same code and numbers as a simulation's."""
    if not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
    prof = old.get("profile", {})
    if (prof.get("simulation_fingerprint", prof.get("fingerprint")) != fingerprint
            or old.get("simulation_fingerprint", old.get("model_fingerprint")) != simulation_fingerprint()
            or old.get("l2_start", "empty") != l2_start):
        return {}
    out = {}
    for r in old.get("rows", []):
        fields = {k: r[k] for k in ("predicted", "sim") if k in r}
        if "predicted" in fields:  # a refused prediction is tried again
            sim = dict(fields.get("sim") or {})
            simulated = sim.pop("simulated", None)  # the simulation's own times, before the call's work
            if simulated:
                fields = {"predicted": {**fields["predicted"], **simulated}, "sim": sim}
            out[_cache_key(r)] = fields
    return out


def add_call_work(rows: list[dict], profile) -> None:
    """Add to each forward row's simulated time what its library's call launches beside the kernels
    (simulator/calls.py): row["call"] names the pieces, row["sim"]["simulated"] keeps the simulation's own
    times, row["predicted"] holds the sum."""
    from flashsim.simulator.calls import call_busy_s

    from .validate_impls import IMPLS

    for row in rows:
        impl = IMPLS.get(row["impl"])
        if "predicted" not in row or impl is None or row["algo"] != impl.algo:
            continue
        pieces = call_busy_s(impl.launch, profile)
        if not pieces:
            continue
        extra = sum(pieces.values())
        pred = row["predicted"]
        # a copy: rows that share a simulation share its result's dicts
        row["sim"] = {**row.get("sim", {}), "simulated": {q: pred[q] for q in ("time_s", "kernel_time_s")}}
        row["predicted"] = {**pred, "time_s": pred["time_s"] + extra, "kernel_time_s": pred["kernel_time_s"] + extra}
        row["call"] = pieces


def _cache_key(row: dict) -> tuple:
    return row["impl"], row["config_id"], json.dumps(row.get("tiling"), sort_keys=True), row.get("sim_headdim")


def compare(out_dir: Path, measured: Path, hw: str = "h200", overrides: list[str] | None = None, jobs: int = 0,
            command: str = "", log=print, data_set: DataSet = DEV, flushed_l2: bool = True,
            o_store: str = "", journal_only: bool = False, share: str = "", heavy_above_s: float = 300.0
            ) -> dict | None:  # fmt: skip
    """Predict, score and write the set's report (validation.json / .md / .png for the development set,
    testset.* for the test set) into out_dir. flushed_l2: simulate each call from the L2 validate's flush
    leaves, as it was measured (False: from an empty L2). o_store: as for prediction_inputs.ran_tiling.
    Returns the report, or None with journal_only: the simulations (of `share` only, if given: SHARES, split
    at heavy_above_s) go into the set's journal, and a later comparison writes the report from it."""
    from flashsim.hw_profiles import load_profile

    from .calibrate_gpu import today

    records = store.load(measured)
    if not records:
        raise FlashsimError(f"no measurements in {measured}; run `flashsim validate` on a GPU first")
    profile = load_profile(hw, overrides or [])
    fingerprint = profile_fingerprint(profile, simulation=True)
    rows = rows_from(records, o_store)
    jobs = jobs or max(1, min(8, (os.cpu_count() or 1)))
    json_path, md_path, png_path = (out_dir / f"{data_set.stem}{ext}" for ext in (".json", ".md", ".png"))
    journal = Journal.of_set(out_dir, data_set, fingerprint)
    l2_start = L2_STARTS[flushed_l2]
    select = (share_filter(json_path, share, heavy_above_s) if share else (lambda _: True)) if journal_only else None
    filled = predict(rows, hw, overrides or [], jobs, _cached(json_path, fingerprint, l2_start), log, journal,
                     flushed_l2, select)
    if journal_only or not filled:
        log(f"validate: {data_set.name}: simulations in {journal.path}; a comparison without --journal-only "
            "writes the report from it" if not filled else f"validate: {data_set.name}: nothing to simulate, "
            f"{json_path.name} holds this model's predictions")
        return None
    add_call_work(rows, profile)
    scored = [r for r in rows if r.get("predicted")]
    summary = summarize_groups(scored, "impl", QUANTITIES)
    by_algo = summarize_groups(scored, "algo", QUANTITIES)
    overall = {q: summarize(_pairs(scored, q)) for q in QUANTITIES}
    sessions = [r for r in records if r["type"] == "session"]
    report = {
        "set": {"name": data_set.name, "title": data_set.title, "measured": measured.name},
        "provenance": {
            "measured": sessions[-1] if sessions else {},
            "sessions": [{k: r.get(k) for k in ("date", "command", "driver", "torch")} for r in sessions],
            "compared": {"date": today(), "command": command},
        },
        "profile": {"name": profile.name, "hw": _display(hw), "fingerprint": profile_fingerprint(profile),
                    "simulation_fingerprint": fingerprint},
        "model_fingerprint": model_fingerprint(),
        "simulation_fingerprint": simulation_fingerprint(),
        "l2_start": l2_start,
        "quantities": {q: {"label": lab, "unit": unit} for q, (lab, _, unit, _) in QUANTITIES.items()},
        "impl_algo": {r["impl"]: r["algo"] for r in rows},
        "summary": summary,
        "summary_by_algo": by_algo,
        "overall": overall,
        "rows": rows,
        "failed": [
            {"impl": r["impl"], "config_id": r["config_id"], "status": s}
            for r in rows
            for s in r["status"].values()
            if s != "ok"
        ]
        + [
            {"impl": r["impl"], "config_id": r["config_id"], "status": f"prediction failed: {r['predict_error']}"}
            for r in rows
            if r.get("predict_error")
        ],
        "plot": png_path.name,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    md_path.write_text(markdown(report))
    plot(scored, png_path)
    journal.close()
    return report


def _display(hw: str) -> str:
    """A profile given by path is recorded by file name only (no machine paths in results)."""
    return Path(hw).name if ("/" in hw or os.sep in hw) else hw


def _pairs(rows: list[dict], q: str) -> list[tuple[float, float]]:
    return [
        (r["predicted"][q], r["measured"][q])
        for r in rows
        if r["predicted"].get(q) is not None and r["measured"].get(q) is not None and r["measured"][q] > 0
    ]


def _err(predicted: float | None, measured: float | None) -> float | None:
    return (predicted - measured) / measured * 100 if predicted and measured else None


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _sessions(prov: dict) -> str:
    """The measuring runs, oldest first (a later run's records replace an earlier one's for the same key)."""
    runs = prov.get("sessions")
    if not isinstance(runs, list) or not runs:
        m = prov["measured"]
        return f"`{m.get('command', '?')}` on {m.get('date', '?')}"
    return "; then ".join(f"`{r.get('command', '?')}` on {r.get('date', '?')}" for r in runs)


def markdown(report: dict) -> str:
    prov = report["provenance"]["measured"]
    title = report.get("set", {}).get("title")
    out = [
        "# Simulator validation" + (f": {title}" if title else ""),
        "",
        f"Measured on {prov.get('gpu', '?')} (driver {prov.get('driver', '?')}, CUDA {prov.get('cuda_runtime', '?')}, "
        f"torch {prov.get('torch', '?')}) by {_sessions(report['provenance'])}; predicted with "
        f"profile {report['profile']['name']} on {report['provenance']['compared']['date']}.",
        "",
        "Errors are (predicted - measured) / measured: MAPE and max are of its absolute value, bias its mean "
        "(positive: the simulator predicts too much). Times are medians of CUDA-event timings with L2 flushed "
        "before each call, and the GPU busy time of a call (its kernels' durations, from the CUDA profiler) is "
        "compared with the simulated time less its launch overheads. Bytes are Nsight Compute's "
        "dram__bytes_read/write.sum and lts__t_bytes.sum (ncu counts L2 write-back after the kernel nowhere; the "
        "simulator's hbm_write leaves it out too). "
        + ("Each prediction starts from the full, partly dirty L2 the flush leaves and pays the write-backs "
           "of the dirty lines its reads evict; the bytes, which ncu counts after flushing the caches itself, "
           "are predicted from an empty L2." if report.get("l2_start") == "flushed" else
           "Each prediction starts from an empty L2 (the flush's dirty lines not simulated)."),
        "",
        f"![predicted vs measured]({report['plot']})",
        "",
    ]
    calls = sorted({(r["impl"], k, v) for r in report.get("rows", []) for k, v in (r.get("call") or {}).items()})
    if calls:  # what a library's call launches beside its kernel, added to the simulated time (simulator/calls.py)
        out += ["Beside its simulated kernel each call of " + "; ".join(
            f"{impl} launches a {piece.removesuffix('_s')} of {t * 1e6:.2f} us" for impl, piece, t in calls)
            + " (GPU busy time, `simulator/calls.py`), added to its predicted times.", ""]
    for q, (label, *_) in QUANTITIES.items():
        lines = [
            f"{impl} | {report['impl_algo'][impl]} | {s[q]['n']} | {_fmt(s[q]['mape'])} | {_fmt(s[q]['max_err'])} | "
            f"{_fmt(s[q]['bias'])}"
            for impl, s in report["summary"].items()
            if s[q]["n"]
        ]
        if not lines:
            continue
        o = report["overall"][q]
        out += [
            f"## {label}",
            "",
            "implementation | simulated as | n | MAPE % | max % | bias %",
            "---|---|---|---|---|---",
        ]
        out += lines + [f"**all** | | {o['n']} | {_fmt(o['mape'])} | {_fmt(o['max_err'])} | {_fmt(o['bias'])}", ""]
    out += ["## Every measurement", "", "configuration | implementation | measured ms (events / GPU busy) | "
            "predicted ms (with / without launches) | error % (events / busy) | HBM read MB (meas / pred) | "
            "L2 MB (meas / pred)", "--- | --- | --- | --- | --- | --- | ---"]  # fmt: skip
    for r in report["rows"]:
        m, p = r["measured"], r.get("predicted", {})
        if "time_s" not in m:
            continue
        busy = m.get("kernel_time_s")
        err = _err(p.get("time_s"), m["time_s"])
        err_busy = _err(p.get("kernel_time_s"), busy)
        hbm = f"{m['hbm_read'] / 1e6:.0f} / {p.get('hbm_read', 0) / 1e6:.0f}" if "hbm_read" in m and p else ""
        l2 = f"{m['l2_bytes'] / 1e6:.0f} / {p.get('l2_bytes', 0) / 1e6:.0f}" if "l2_bytes" in m and p else ""
        pred = f"{p['time_s'] * 1e3:.3f} / {p['kernel_time_s'] * 1e3:.3f}" if p.get("time_s") else "-"
        meas = f"{m['time_s'] * 1e3:.3f} / " + (f"{busy * 1e3:.3f}" if busy else "-")
        out.append(f"{r['config_id']} | {r['impl']} | {meas} | {pred} | {_fmt(err)} / {_fmt(err_busy)} | {hbm} | {l2}")
    if report["failed"]:
        out += ["", "## Not compared", ""]
        out += [f"- {f['config_id']} {f['impl']}: {f['status']}" for f in report["failed"]]
    launched = {r["impl"]: r["launched"] for r in report["rows"] if r.get("launched")}
    if launched:
        out += ["", "## Kernels each implementation launches (one call, torch profiler)", ""]
        for impl, names in sorted(launched.items()):
            out.append(f"- {impl}: " + "; ".join(f"`{n[:90]}`" for n in names[:8]))
    return "\n".join(out) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    """Predicted against measured, log-log, one panel per quantity with data, colour per implementation.
    A prediction of zero (HBM writes the simulator leaves in L2) cannot sit on a log axis and is left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [q for q in QUANTITIES if _pairs(rows, q)] or ["time_s"]
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.8 * cols, 4.4 * nrows), squeeze=False)
    impls = sorted({r["impl"] for r in rows})
    cmap = plt.get_cmap("tab10")
    for ax, q in zip(axes.flat, panels, strict=False):
        _, label, unit, scale = QUANTITIES[q]
        lo, hi, dropped = float("inf"), 0.0, 0
        for i, impl in enumerate(impls):
            pts = _pairs([r for r in rows if r["impl"] == impl], q)
            dropped += sum(1 for p, _ in pts if p <= 0)
            pts = [(p * scale, m * scale) for p, m in pts if p > 0]
            if not pts:
                continue
            lo = min(lo, *(v for pair in pts for v in pair))
            hi = max(hi, *(v for pair in pts for v in pair))
            ax.scatter([m for _, m in pts], [p for p, _ in pts], s=16, color=cmap(i % 10), label=impl, alpha=0.85)
        if hi > 0:
            line = [lo / 1.5, hi * 1.5]
            ax.plot(line, line, color="black", lw=0.8)
            ax.fill_between(line, [x / 1.25 for x in line], [x * 1.25 for x in line], color="grey", alpha=0.15)
            ax.set_xscale("log")
            ax.set_yscale("log")
        note = f"; {dropped} predicted 0 not shown" if dropped else ""
        ax.set_title(f"{label} (band: ±25%{note})", fontsize=10)
        ax.set_xlabel(f"measured ({unit})")
        ax.set_ylabel(f"predicted ({unit})")
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
