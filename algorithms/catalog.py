"""Every algorithm's record (algorithms/record.py), by name. Adding a schedule: write its module in
algorithms/schedules/ with an `ALGORITHM = Algorithm(...)` record, and add it to _SHIPPED below (or call
`register` at run time).

A shipped record's module is imported when the record is first asked for: a run of one algorithm does not
pay for importing every schedule (a tenth of a short simulation's process time)."""

from __future__ import annotations

from importlib import import_module

from flashsim.errors import FlashsimError

from .record import Algorithm

# name -> module under algorithms/schedules/ that defines its ALGORITHM, in listing order
_SHIPPED = {
    "standard": "standard", "v1": "v1", "v2": "v2", "v3": "v3", "v3-fp8": "v3_fp8", "decode": "decode",
    "standard-bwd": "standard_bwd", "v2-bwd": "v2_bwd", "v3-bwd": "v3_bwd",
}
# name -> record, or None for a shipped record whose module is not imported yet
_RECORDS: dict[str, Algorithm | None] = dict.fromkeys(_SHIPPED)


def _load(name: str) -> Algorithm:
    record = import_module(f"{__package__}.schedules.{_SHIPPED[name]}").ALGORITHM
    if record.name != name:
        raise RuntimeError(f"schedules/{_SHIPPED[name]}.py defines {record.name!r}, not {name!r}")
    _RECORDS[name] = record
    return record


def register(record: Algorithm, *, replace: bool = False) -> Algorithm:
    """Add a record to the catalog (replace: allow overwriting one of the same name)."""
    if record.name in _RECORDS and not replace:
        raise FlashsimError(f"algorithm {record.name!r} is already in the catalog")
    _RECORDS[record.name] = record
    return record


def unregister(name: str) -> None:
    _RECORDS.pop(name, None)


def get(name: str) -> Algorithm:
    try:
        record = _RECORDS[name]
    except (KeyError, TypeError):
        raise FlashsimError(f"unknown algorithm {name!r}; choose one of {', '.join(_RECORDS)}") from None
    return record if record is not None else _load(name)


def names() -> tuple[str, ...]:
    return tuple(_RECORDS)


def records() -> tuple[Algorithm, ...]:
    return tuple(get(name) for name in _RECORDS)


def check_dtype(algo: str, problem) -> None:
    """Refuse a problem dtype the algorithm does not take, naming those that do."""
    rec = get(algo)
    if problem.dtype not in rec.dtypes:
        others = [r.name for r in records() if problem.dtype in r.dtypes]
        where = f" ({problem.dtype} runs with {', '.join(others)})" if others else ""
        raise FlashsimError(f"{algo} takes {', '.join(rec.dtypes)} inputs, not {problem.dtype}{where}")


def check_features(algo: str, problem, profile) -> None:
    """Say which hardware feature a profile lacks for the algorithm, or which dtype it does not take."""
    rec = get(algo)
    missing = [f for f in rec.features if not profile.has(f)]
    if missing:
        raise FlashsimError(f"{algo} needs {' and '.join(missing)}, which {profile.name} does not have")
    check_dtype(algo, problem)
