"""Bytes per kernel from Nsight Compute for a subset of validate's configurations.

ncu profiles a child process (`python -m flashsim.experiments.validate_ncu PLAN MANIFEST`) that, for each planned
(implementation, configuration), runs one warm-up call outside the profiled range, then inside
cudaProfilerStart/Stop launches a marker kernel and one call. In ncu's CSV the markers split the kernel list
into calls; the child's manifest says which call each marker began. One ncu process per configuration keeps
what finished when a later one runs out of time or crashes.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .calibrate_gpu import ROOT

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum", "gpu__time_duration.sum")
MARKER = "ncu_marker"
# ncu's units -> factor to bytes or seconds. It prints long names (Kbyte, usecond) or short ones (KB, us,
# as --print-units base gives); its prefixes are decimal.
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
UNIT_SCALE = {
    "": 1.0,
    **{f"{p}byte": f for p, f in _PREFIX.items()},
    **{f"{p}B": f for p, f in _PREFIX.items()},
    **_TIME,
    **{"second": 1.0, "msecond": 1e-3, "usecond": 1e-6, "nsecond": 1e-9},
}


def to_base(value: str, unit: str) -> float:
    """ncu's printed value ("1,234.5") in bytes or seconds."""
    number = float(value.replace(",", "").strip())
    unit = unit.strip()
    if unit not in UNIT_SCALE:
        raise ValueError(f"unexpected ncu unit {unit!r}")
    return number * UNIT_SCALE[unit]


def parse_csv(text: str) -> list[dict]:
    """ncu --csv output (one row per kernel and metric) -> [{"id", "name", "metrics": {metric: value}}] in
    launch order. Lines before the CSV header (ncu's own messages) are skipped."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    kernels: dict[int, dict] = {}
    for row in csv.DictReader(lines[start:]):
        try:
            kid = int(row["ID"])
        except (KeyError, TypeError, ValueError):
            continue
        k = kernels.setdefault(kid, {"id": kid, "name": row.get("Kernel Name", ""), "metrics": {}})
        metric = row.get("Metric Name")
        if metric:
            try:
                k["metrics"][metric] = to_base(row.get("Metric Value", ""), row.get("Metric Unit", ""))
            except ValueError:  # "n/a" or a unit we do not know: the metric stays missing, totals become None
                k.setdefault("unparsed", []).append(f"{metric}={row.get('Metric Value')} {row.get('Metric Unit')}")
    return [kernels[i] for i in sorted(kernels)]


def group_calls(kernels: list[dict], manifest: list[dict]) -> list[tuple[dict, list[dict]]]:
    """Pair each manifest entry that launched a marker with the kernels after its marker (up to the next)."""
    groups: list[list[dict]] = []
    for k in kernels:
        if k["name"].split("(")[0].strip() == MARKER:
            groups.append([])
        elif groups:
            groups[-1].append(k)
    marked = [m for m in manifest if m.get("marker")]
    return [(m, groups[i] if i < len(groups) else []) for i, m in enumerate(marked)]


def record(entry: dict, kernels: list[dict]) -> dict:
    """One "ncu" measurement record: totals over the call's kernels plus the per-kernel numbers."""
    rows = [
        {
            "name": k["name"][:160],
            "hbm_read": k["metrics"].get("dram__bytes_read.sum"),
            "hbm_write": k["metrics"].get("dram__bytes_write.sum"),
            "l2_bytes": k["metrics"].get("lts__t_bytes.sum"),
            "time_s": k["metrics"].get("gpu__time_duration.sum"),
        }
        for k in kernels
    ]
    rec = {key: entry[key] for key in ("key", "impl", "algo", "config", "config_id", "tiling")}
    rec.update(type="ncu", status=entry.get("status", "ok"), error=entry.get("error"), kernels=rows)
    if rec["status"] == "ok" and not rows:
        rec.update(status="failed", error="ncu recorded no kernels for this call")
    if rec["status"] == "ok":
        for q in ("hbm_read", "hbm_write", "l2_bytes", "time_s"):
            values = [r[q] for r in rows]
            rec[q] = sum(values) if all(v is not None for v in values) else None
    return rec


def run(plan: list[dict], deadline: float, log=print) -> list[dict]:
    """Profile the plan (entries: key, impl, algo, config, config_id, tiling, cfg) under ncu, one process per
    configuration, until the deadline (time.monotonic()). Returns the "ncu" records made."""
    ncu = shutil.which("ncu")
    if ncu is None:
        log("validate: ncu not found; byte counts not measured")
        return []
    by_cfg: dict[str, list[dict]] = {}
    for entry in plan:
        by_cfg.setdefault(entry["config_id"], []).append(entry)
    records = []
    with tempfile.TemporaryDirectory(prefix="flashsim-ncu-") as tmp:
        for cfg_id, entries in by_cfg.items():
            left = deadline - time.monotonic()
            if left < 30:
                log("validate: time limit reached before all ncu measurements; rerun to continue")
                break
            plan_path, manifest_path = Path(tmp) / f"{cfg_id}.plan.json", Path(tmp) / f"{cfg_id}.manifest.jsonl"
            csv_path = Path(tmp) / f"{cfg_id}.csv"
            plan_path.write_text(json.dumps(entries))
            cmd = [ncu, "--clock-control", "none", "--metrics", ",".join(METRICS), "--profile-from-start", "off",
                   "--target-processes", "all", "--csv", "--print-units", "base", "--log-file", str(csv_path),
                   sys.executable, "-m", "flashsim.experiments.validate_ncu",
                   str(plan_path), str(manifest_path)]  # fmt: skip
            log(f"validate: ncu {cfg_id} ({len(entries)} calls)")
            try:
                proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=left)
                failure = None if proc.returncode == 0 else _last_line(proc.stderr or proc.stdout)
            except subprocess.TimeoutExpired:
                failure = "ncu run stopped at the time limit"
            manifest = _read_jsonl(manifest_path)
            kernels = parse_csv(csv_path.read_text()) if csv_path.is_file() else []
            for entry, ks in group_calls(kernels, manifest):
                records.append(record(entry, ks))
            seen = {m["key"] for m in manifest if m.get("marker")}
            for entry in entries:
                if entry["key"] in seen:
                    continue
                m = next((m for m in manifest if m["key"] == entry["key"]), {})
                err = m.get("error") or failure or "not profiled"
                records.append(record({**entry, "status": "failed", "error": err}, []))
    return records


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out


def _last_line(text: str) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "ncu failed"


def child(plan_path: str, manifest_path: str) -> int:
    """Runs under ncu: each planned call once to warm up, then marker + call inside the profiled range."""
    import numpy as np
    import torch

    from .calibrate_gpu import load_module, read_gpu, require_gpu
    from .validate_impls import IMPLS, Config, impl_context, inputs, make_call

    cp = require_gpu("validate's ncu child")
    marker = load_module(cp, "compute", read_gpu(cp).arch).get_function(MARKER)
    plan = json.loads(Path(plan_path).read_text())
    with open(manifest_path, "a") as manifest:
        for i, entry in enumerate(plan):
            out = {"key": entry["key"], "marker": False, "status": "ok", "error": None}
            impl, cfg = IMPLS[entry["impl"]], Config(**entry["cfg"])
            try:
                q, k, v = inputs(cfg)
                with impl_context(impl):
                    fn = make_call(impl, q, k, v, cfg)
                    fn()
                    torch.cuda.synchronize()
                    torch.cuda.profiler.start()
                    try:
                        marker((1,), (1,), (np.int32(i),))
                        cp.cuda.Device().synchronize()
                        out["marker"] = True
                        fn()
                        torch.cuda.synchronize()
                    finally:
                        torch.cuda.profiler.stop()
            except Exception as exc:  # recorded in the manifest; the next call still runs
                out.update(status="failed", error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
            manifest.write(json.dumps({**entry, **out}) + "\n")
            manifest.flush()
    return 0


if __name__ == "__main__":
    sys.exit(child(sys.argv[1], sys.argv[2]))
