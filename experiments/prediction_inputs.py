"""What the simulator is asked for each measurement of a validation set: the row a measurement makes (its
algorithm, problem and the tiles its kernel ran), and the simulation job a row becomes (the profile, the
units an implementation runs on, the L2 it starts from).

This module and the model's sources (algorithms/, simulator/, hw_profiles/) decide every prediction: the hash
of their code (comments and docstrings left out) is the model fingerprint a report carries, and the same hash
less what only assembles a library's call around its kernels (simulator/calls.py) is the simulation fingerprint
a prediction journal carries (validate_compare), so that a change to either's code predicts everything again, a
change to the call work only re-assembles the reports, and a change to how reports are made, or to what the code
says of itself, does neither.
"""

from __future__ import annotations

import json
import time

from flashsim.algorithms import catalog
from flashsim.errors import FlashsimError

from . import validate_store as store
from .validate_impls import IMPLS, kernel_tiling, launch_rule

# The quantities Nsight Compute measures (after its own cache flush), not the timed calls.
BYTES = {"hbm_read", "hbm_write", "l2_bytes"}

# SDPA's math backend upcasts bf16 to fp32 and runs cuBLAS's FFMA SGEMMs (its kernel names say ffma): the
# simulator's fp32 GEMMs run on the tf32 tensor-core rate, so for it that rate is the FP32 FMA rate.
SIM_SWAPS = {
    "sdpa-math": {
        "mma_sync_tf32_flops_per_clk_per_sm": "fp32_flops_per_clk_per_sm",
        "wgmma_tf32_flops_per_clk_per_sm": "fp32_flops_per_clk_per_sm",
    }
}
# our kernels whose epilogue stores O straight from the accumulator fragments (kernels/v3_epilogue.cuh)
FRAGMENT_STORES = frozenset({"v3", "v3-fp8"})


def ran_tiling(rec: dict, o_store: str = "") -> dict | None:
    """The tiling the measured kernel ran: the record's own, or, for one of our kernels measured before records
    carried it, its tile table's entry for the head dim and mask (what the kernel picks when the caller names
    no tiles; V1's split count is left to FA1's rule, which the kernel also follows). Our kernels that store O
    from their fragments run with that form; o_store names another ("tma": the schedule's default, FA3's)."""
    impl = IMPLS.get(rec["impl"])
    if rec["impl"] in FRAGMENT_STORES and rec["algo"] == impl.algo and (o_store or "fragments") != "tma":
        base = rec.get("tiling") or _table_tiling(rec) or {}
        return {**base, "o_store": o_store or "fragments"}
    if impl is not None and impl.launch == "cudnn-sm90":
        return launch_rule(impl, rec["algo"], rec["config"]["headdim"])[0] or rec.get("tiling")
    if impl is not None and impl.exp2 and rec["algo"] == impl.algo:
        # a kernel whose code computes the exponential its own way: the schedule's tiles, with that form (and,
        # for FA2, its launch rule, which simulate_job settles on the profile's GPU)
        launch = {"launch": impl.launch} if impl.launch else {}
        return {**(rec.get("tiling") or {}), "exp2": impl.exp2, **launch}
    if rec.get("tiling") or impl is None or impl.kind != "ours":
        return rec.get("tiling")
    if rec["algo"] != IMPLS[rec["impl"]].algo:
        return None  # a backward or decode record: its kernel's tiles are recorded or the schedule's own
    return _table_tiling(rec)


def _table_tiling(rec: dict) -> dict | None:
    """Our kernel's tile table entry for the record's head dim and mask (None: no entry, e.g. a head dim the
    kernels are no longer built for: the model's default tiles)."""
    cfg = rec["config"]
    try:
        tiling = kernel_tiling(rec["impl"], cfg["headdim"], cfg["causal"])
    except FlashsimError:
        return None
    if catalog.get(rec["algo"]).kv_outer_loop:
        tiling.pop("splits", None)
    return tiling


def _sim_headdim(rec: dict) -> dict:
    """{"sim_headdim": D} where the measured kernel runs another head dim than the problem's (cuDNN's d96 runs
    its d128 kernel), else {}."""
    impl = IMPLS.get(rec["impl"])
    if impl is None or not impl.launch:
        return {}
    d = launch_rule(impl, rec["algo"], rec["config"]["headdim"])[1]
    return {"sim_headdim": d} if d != rec["config"]["headdim"] else {}


def rows_from(records: list[dict], o_store: str = "") -> list[dict]:
    """One row per (implementation, configuration): its timing and, where ncu ran, its bytes (o_store: as for
    ran_tiling)."""
    rows: dict[tuple[str, str], dict] = {}
    for rec in list(store.latest(records, "time").values()) + list(store.latest(records, "ncu").values()):
        rid = (rec["impl"], rec["config_id"])
        row = rows.setdefault(
            rid,
            {
                "impl": rec["impl"],
                "algo": rec["algo"],
                "config_id": rec["config_id"],
                "config": rec["config"],
                "tiling": ran_tiling(rec, o_store),
                **_sim_headdim(rec),
                "measured": {},
                "status": {},
            },
        )
        row["status"][rec["type"]] = rec["status"] if rec["status"] == "ok" else f"{rec['status']}: {rec.get('error')}"
        if rec["status"] != "ok":
            continue
        if rec["type"] == "time":
            row["measured"]["time_s"] = rec["time_s"]
            if rec.get("kernel_time_s"):
                row["measured"]["kernel_time_s"] = rec["kernel_time_s"]
            row["rel_err"] = rec.get("rel_err")
            row["tflops"] = rec.get("tflops")
            if rec.get("launched"):
                row["launched"] = rec["launched"]
        else:
            for q in ("hbm_read", "hbm_write", "l2_bytes"):
                if rec.get(q) is not None:
                    row["measured"][q] = rec[q]
            row["ncu_kernels"] = rec.get("kernels", [])
    return sorted(rows.values(), key=lambda r: (r["impl"], r["config_id"]))


def problem_args(config: dict, sim_headdim: int | None = None) -> dict:
    """Problem's arguments for a row: its configuration, with the head dim its kernel runs where that differs
    (the products and tiles of that kernel; its global reads are then counted at that width too)."""
    keys = ("batch", "heads", "kv_heads", "seqlen_q", "seqlen_k", "headdim", "causal", "dtype", "causal_align",
            "page_size")
    args = {k: config[k] for k in keys if k in config}
    return args | {"headdim": sim_headdim} if sim_headdim else args


def simulate_job(job: tuple) -> dict:
    """One prediction (runs in a worker process): the simulator's time and bytes, or the error it raised.
    job: (algo, problem kwargs, tiling dict or None, profile name or path, --set overrides, and optionally
    {profile key: profile key whose value it takes} for an implementation that runs on other units, whether
    the run starts from the flushed L2 (absent: an empty one), and whether it simulates the whole chip rather
    than the default head sample (absent: the sample, as the reports are predicted))."""
    algo, problem, tiling, hw, overrides, *rest = job
    swaps = rest[0] if rest else {}
    flushed = bool(rest[1]) if len(rest) > 1 else False
    whole_chip = bool(rest[2]) if len(rest) > 2 else False
    from flashsim.algorithms.problem import Problem
    from flashsim.algorithms.tiling import Tiling
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator import simulate

    try:
        t0 = time.perf_counter()
        profile = load_profile(hw, overrides)
        if swaps:
            profile = profile.with_overrides({k: getattr(profile, v) for k, v in swaps.items()})
        if "causal_align" in problem and not hasattr(Problem, "causal_align"):
            # a row measured with another causal mask than the simulator's (top-left): until Problem takes
            # causal_align it cannot be simulated as it ran
            return {"predict_error": f"this simulator has no causal_align; the row ran {problem['causal_align']}"}
        prob = Problem(**problem)
        if algo == "v1" and tiling and "splits" not in tiling:
            # a record without the launched splits: the model's default, FA1's rule, which the kernel also
            # follows (with its compiled register count where the model estimates one)
            from flashsim.algorithms.tiling import fa1_splits

            tiling = {**tiling, "splits": fa1_splits(prob, Tiling(**tiling), profile)}
        if tiling and tiling.get("launch") == "fa2":  # FA2's tiles or its split-KV kernel's, on this GPU
            from flashsim.simulator.sdpa import fa2_tiling

            tiling = {**fa2_tiling(prob, profile), **{k: v for k, v in tiling.items() if k != "launch"}}
        if tiling and "block_m" not in tiling:  # only the code's form given: the schedule's own tiles
            from flashsim.algorithms.tiling import resolve_tiling

            tiling = {**resolve_tiling(algo, prob, profile).as_dict(), **tiling}
        sample = {"sms": None} if whole_chip else {}
        res = simulate(algo, prob, profile, Tiling(**tiling) if tiling else None, flushed_l2=flushed, **sample)
        d = res.as_dict()
        b = d["bytes"]
        return {
            "predicted": {
                "time_s": d["time_s"],
                "kernel_time_s": d["kernel_time_s"],
                "hbm_read": b["hbm_read"],
                "hbm_write": b["hbm_write"],
                "l2_bytes": b["l2_read"] + b["l2_write"],
            },
            "sim": {"bound_by": d["bound_by"], "tiling": d["tiling"], "wall_s": time.perf_counter() - t0},
        }
    except Exception as exc:  # a refused configuration is a result of the comparison, not a crash
        return {"predict_error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}


def job_args(todo: list[dict], hw: str, overrides: list[str], flushed_l2: bool) -> tuple[list, dict]:
    """The simulation job of each row (algo, problem, tiling, profile, --set overrides, unit swaps, flushed
    L2), and {row index: the job again from an empty L2} for rows whose bytes ncu measured."""
    job_args = [
        (r["algo"], problem_args(r["config"], r.get("sim_headdim")), r.get("tiling"), hw, overrides,
         SIM_SWAPS.get(r["impl"], {}), flushed_l2)
        for r in todo
    ]
    # a row that names no tiles runs the model's default: named, it is one simulation with a row that names
    # the same tiles (SDPA flash and our v2); a default the model refuses stays None, to fail in simulate_job
    profiles: dict = {}
    for i, (algo, problem, tiling, _, _, swaps, _) in enumerate(job_args):
        if tiling is None:
            try:
                from flashsim.algorithms.problem import Problem
                from flashsim.algorithms.tiling import resolve_tiling
                from flashsim.hw_profiles import load_profile

                key = json.dumps(swaps, sort_keys=True)
                if key not in profiles:
                    base = load_profile(hw, overrides)
                    swapped = {k: getattr(base, v) for k, v in swaps.items()}
                    profiles[key] = base.with_overrides(swapped) if swaps else base
                default = resolve_tiling(algo, Problem(**problem), profiles[key]).as_dict()
            except Exception:  # the simulation says why
                continue
            job_args[i] = (algo, problem, default, hw, overrides, swaps, flushed_l2)
    # ncu's bytes were counted from its own clean, empty L2: rows that have them are simulated from one for them
    byte_args = {i: (*a[:6], False) for i, (a, r) in enumerate(zip(job_args, todo, strict=True))
                 if flushed_l2 and BYTES & set(r["measured"])}  # fmt: skip
    return job_args, byte_args
