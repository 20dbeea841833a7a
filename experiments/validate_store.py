"""JSON-lines storage of validation measurements: one record per line, appended and flushed as each one is
measured, so an interrupted sweep keeps everything it finished and a rerun resumes where it stopped.

A record is a dict with a "type" ("time", "ncu" or "session") and, for measurements, a unique "key". When a
key appears more than once (a failed measurement retried later), the last record wins.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from flashsim.errors import FlashsimError


def append(path: Path, record: dict) -> None:
    """Append one record as one line and push it to disk before returning. A torn last line left by a killed
    run is cut off first, so the new record starts a line of its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True, allow_nan=False)
    _cut_torn_tail(path)
    with path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _cut_torn_tail(path: Path) -> None:
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("r+b") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            data = path.read_bytes()
            f.truncate(data.rfind(b"\n") + 1)


def load(path: Path) -> list[dict]:
    """Every complete record in file order. A torn last line (the process died mid-write) is skipped; a bad
    line anywhere else means the file is not ours, and is an error."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise FlashsimError(f"{path}: line {i + 1} is not JSON; not a validation measurement file") from None
        if not isinstance(rec, dict) or "type" not in rec:
            raise FlashsimError(f"{path}: line {i + 1} is not a measurement record")
        records.append(rec)
    return records


def latest(records: list[dict], kind: str | None = None) -> dict[str, dict]:
    """key -> the last record with that key (of one type if given)."""
    out: dict[str, dict] = {}
    for rec in records:
        if "key" in rec and (kind is None or rec["type"] == kind):
            out[rec["key"]] = rec
    return out


def done_keys(records: list[dict], retry_failed: bool = False) -> set[str]:
    """Keys that a resumed sweep skips: everything measured, or only the successes with retry_failed."""
    return {k for k, r in latest(records).items() if not retry_failed or r.get("status") == "ok"}
