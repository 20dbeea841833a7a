"""Every algorithm's record (algorithms/record.py), by name. Adding a schedule: write its module in
algorithms/schedules/ with an `ALGORITHM = Algorithm(...)` record, and add it to _SHIPPED below (or call
`register` at run time)."""

from __future__ import annotations

from flashsim.errors import FlashsimError

from .record import Algorithm
from .schedules import decode, standard, standard_bwd, v1, v2, v2_bwd, v3, v3_bwd, v3_fp8

_SHIPPED = (standard, v1, v2, v3, v3_fp8, decode, standard_bwd, v2_bwd, v3_bwd)
_RECORDS: dict[str, Algorithm] = {m.ALGORITHM.name: m.ALGORITHM for m in _SHIPPED}


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
        return _RECORDS[name]
    except (KeyError, TypeError):
        raise FlashsimError(f"unknown algorithm {name!r}; choose one of {', '.join(_RECORDS)}") from None


def names() -> tuple[str, ...]:
    return tuple(_RECORDS)


def records() -> tuple[Algorithm, ...]:
    return tuple(_RECORDS.values())


def check_dtype(algo: str, problem) -> None:
    """Refuse a problem dtype the algorithm does not take, naming those that do."""
    rec = get(algo)
    if problem.dtype not in rec.dtypes:
        others = [r.name for r in _RECORDS.values() if problem.dtype in r.dtypes]
        where = f" ({problem.dtype} runs with {', '.join(others)})" if others else ""
        raise FlashsimError(f"{algo} takes {', '.join(rec.dtypes)} inputs, not {problem.dtype}{where}")


def check_features(algo: str, problem, profile) -> None:
    """Say which hardware feature a profile lacks for the algorithm, or which dtype it does not take."""
    rec = get(algo)
    missing = [f for f in rec.features if not profile.has(f)]
    if missing:
        raise FlashsimError(f"{algo} needs {' and '.join(missing)}, which {profile.name} does not have")
    check_dtype(algo, problem)
