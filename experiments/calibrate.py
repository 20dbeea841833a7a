"""`flashsim calibrate`: run the microbenchmarks on the local GPU and write a profile TOML of what they measured.

The TOML is a profile `based_on` the shipped profile of the same GPU: it lists only the measured parameters,
each with a source naming the benchmark, the GPU and the date; everything else is inherited with its own
source. Raw numbers (sweeps, alternatives not chosen) go to a JSON file beside it. Calibration never looks
at attention timings: every number comes from a microbenchmark of one mechanism.
"""

from __future__ import annotations

import json
import math
import statistics
import traceback
from pathlib import Path
from typing import Any

from flashsim.errors import FlashsimError

from .calibrate_gpu import argv_tail

DEFAULT_OUT_DIR = Path("experiments/results/h200")
TOML_NAME = "calibration.toml"
JSON_NAME = "calibration.json"
L2_LINE = 128  # profiles require l2_bytes to be whole lines


def base_profile_for(gpu_name: str, major: int) -> str:
    """The shipped profile a calibrated one is based on: by name, else by architecture."""
    name = gpu_name.upper()
    for marker, profile in (("H200", "h200-sxm-141gb"), ("H100", "h100-sxm5-80gb"), ("A100", "a100-sxm4-80gb")):
        if marker in name:
            return profile
    return "h100-sxm5-80gb" if major >= 9 else "a100-sxm4-80gb"


def run(benchmarks: list[str] | None = None, quick: bool = False, reps: int = 20, log=print) -> dict:
    """Run the benchmarks on the current GPU; returns {"provenance", "gpu", "results", "errors"}."""
    from . import calibrate_bench as cb
    from .calibrate_gpu import SOURCES, load_module, provenance, read_gpu, require_gpu

    cp = require_gpu("flashsim calibrate")
    gpu = read_gpu(cp)
    names = benchmarks or list(cb.BENCHMARKS)
    unknown = [n for n in names if n not in cb.BENCHMARKS]
    if unknown:
        raise FlashsimError(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(cb.BENCHMARKS)}")
    modules = {src: load_module(cp, src, gpu.arch) for src, targets in SOURCES.items() if gpu.arch in targets}
    bench = cb.Bench(cp=cp, modules=modules, gpu=gpu, reps=reps, quick=quick)
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name in names:
        if name in cb.HOPPER_ONLY and not gpu.hopper:
            errors[name] = f"skipped: needs Hopper (compute capability 9.x), this GPU is {gpu.major}.{gpu.minor}"
            continue
        log(f"calibrate: {name} ...")
        try:
            results[name] = cb.BENCHMARKS[name](bench)
        except Exception as exc:  # one broken benchmark must not lose the others' numbers
            errors[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            log(traceback.format_exc(limit=3))
        cp.get_default_memory_pool().free_all_blocks()
    return {
        "provenance": provenance(cp, gpu, ["calibrate", *argv_tail()[1:]]),
        "gpu": gpu.__dict__,
        "results": results,
        "errors": errors,
    }


def to_params(report: dict) -> dict[str, tuple[int | float, str]]:
    """Profile parameters from a calibration report: key -> (value, source). Only what was measured."""
    prov, gpu, r = report["provenance"], report["gpu"], report["results"]
    where = f"{prov['gpu']} (driver {prov['driver']}, CUDA {prov['cuda_runtime']}), {prov['date']}"

    def src(what: str) -> str:
        return f"measured: {what}; {where}"

    p: dict[str, tuple[int | float, str]] = {
        "sm_count": (gpu["sm_count"], src("CUDA device attribute multiProcessorCount")),
        "smem_per_sm_bytes": (gpu["smem_per_sm_bytes"], src("CUDA device attribute sharedMemPerMultiprocessor")),
        "smem_per_block_max_bytes": (
            gpu["smem_per_block_optin_bytes"],
            src("CUDA device attribute sharedMemPerBlockOptin"),
        ),
        "registers_per_sm": (gpu["registers_per_sm"], src("CUDA device attribute regsPerMultiprocessor")),
    }
    if "clock" in r:
        c = r["clock"]
        p["sm_clock_hz"] = (c["clock_hz"], src(f"SM clock under tensor-core load, {c['how']}"))
    if "hbm" in r:
        h = r["hbm"]
        p["hbm_bandwidth_bytes_per_s"] = (
            h["read_bytes_per_s"],
            src(
                f"streaming read ({h['how']}); write {h['write_bytes_per_s'] / 1e12:.2f} TB/s, copy (read + written) "
                f"{h['copy_bytes_per_s'] / 1e12:.2f} TB/s"
                + (
                    f", torch copy {h['torch_copy_bytes_per_s'] / 1e12:.2f} TB/s"
                    if h.get("torch_copy_bytes_per_s")
                    else ""
                )
            ),
        )
        # a copy's time is its reads' plus its writes': what is left after the reads is the writes' drain rate
        p["hbm_write_bandwidth_bytes_per_s"] = (
            1 / (2 / h["copy_bytes_per_s"] - 1 / h["read_bytes_per_s"]),
            src(f"a copy stream moves {h['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + written) against "
                f"{h['read_bytes_per_s'] / 1e12:.2f} TB/s streaming reads: writes drain at 1 / (2 / copy - 1 / read); "
                f"a pure write stream reaches {h['write_bytes_per_s'] / 1e12:.2f} TB/s"),
        )
    if "latency" in r:
        lat = r["latency"]
        p["l2_hit_latency_cycles"] = (round(lat["l2_hit_cycles"]), src(f"pointer chase, {lat['how']}"))
        p["hbm_latency_cycles"] = (
            round(lat["hbm_cycles"]),
            src(f"pointer chase over {lat['hbm_footprint_bytes'] >> 20} MiB, {lat['how']}"),
        )
    if "l2_sweep" in r:
        s = r["l2_sweep"]
        # per second: the L2 keeps its own clock whatever the SM's (experiments/clock_domains.py); a bulk-copy
        # (TMA) stream, where measured, reaches more than ordinary loads and is what the kernels' copies use
        tma = r.get("tma", {}).get("l2_stream_bytes_per_s")
        p["l2_bandwidth_bytes_per_s"] = (
            float(f"{tma or s['l2_bytes_per_s']:.3g}"),
            src(f"bulk-copy (TMA) stream from a 16 MiB window (ordinary loads: {s['l2_bytes_per_s'] / 1e12:.2f} TB/s, "
                f"{s['how']})" if tma else f"L2 read bandwidth, {s['how']}"),
        )
        eff = s.get("effective_l2_bytes")
        if eff:
            p["l2_bytes"] = (
                int(eff) // L2_LINE * L2_LINE,
                src(
                    f"effective L2 capacity: footprint where read bandwidth falls half-way from the L2 plateau to "
                    f"HBM in the footprint sweep, at most the device attribute l2CacheSize ({gpu['l2_bytes']} B)"
                ),
            )
    if "smem" in r:
        m = r["smem"]
        p["smem_bandwidth_bytes_per_clk_per_sm"] = (m["bytes_per_clk_per_sm"], src(m["how"]))
        p["smem_latency_cycles"] = (round(m["latency_cycles"]), src(m["how"]))
    if "fp32_mufu" in r:
        f = r["fp32_mufu"]
        p["fp32_flops_per_clk_per_sm"] = (f["fp32_flops_per_clk_per_sm"], src(f["how"]))
        p["mufu_ops_per_clk_per_sm"] = (f["mufu_ex2_per_clk_per_sm"], src(f"MUFU.EX2 (ex2.approx.ftz.f32), {f['how']}"))
    if "dep_latency" in r:
        f = r["dep_latency"]
        p["mufu_latency_cycles"] = (round(f["mufu_latency_cycles"], 2), src(f["how"]))
        p["shfl_latency_cycles"] = (round(f["shfl_latency_cycles"], 2), src(f["how"]))
    if "mma_sync" in r:
        m = r["mma_sync"]
        for dtype in ("fp16", "bf16", "tf32"):
            p[f"mma_sync_{dtype}_flops_per_clk_per_sm"] = (m[f"{dtype}_flops_per_clk_per_sm"], src(m["how"]))
        p["mma_sync_latency_cycles"] = (round(m["bf16_latency_cycles"]), src(f"bf16 m16n8k16, {m['how']}"))
    if "ldsm_form" in r:
        from .ldsm_form_fit import KERNEL_WARPS_PER_SM, unhidden_fraction

        s, err, n = unhidden_fraction(r["ldsm_form"]["points"])
        p["mma_sync_ldsm_unhidden_fraction"] = (round(s, 3), src(
            f"max(loads alone, products alone) + f x min(the two) fitted to the {n} k-steps of our v2 forward "
            f"and backward GEMMs at {KERNEL_WARPS_PER_SM} warps per SM (RMS error {100 * err:.1f}%), "
            f"{r['ldsm_form']['how']}"))
        from .ldsm_form_fit import load_latency

        latency, err, n = load_latency(r["ldsm_form"]["points"])
        p["mma_sync_ldsm_latency_cycles"] = (round(latency, 1), src(
            f"max(products alone, loads alone + L / n^2) with n warps per sub-partition fitted to the {n} k-steps "
            f"of our v2 forward and backward GEMMs at 4 to 16 warps per SM (RMS error {100 * err:.1f}%), "
            f"{r['ldsm_form']['how']}"))
        try:
            from .ldsm_form_fit import fill_port_fraction

            share, rates = fill_port_fraction(r["ldsm_form"]["points"])
        except ValueError:
            pass  # a sweep without the fill kernels
        else:
            try:  # the copy engine's bulk copies of the same bytes (Hopper's sweeps only)
                tma_share, tma = fill_port_fraction(r["ldsm_form"]["points"], kernel="tmafill_l4x4_m0")
                by_tma = (f"; as TMA bulk copies ({tma['fills']:.1f} B/clk) the loads keep "
                          f"{tma['loads_beside_fills']:.1f}, a loss of {tma_share:.3f} per filled byte")
            except ValueError:
                by_tma = ""
            p["smem_fill_port_fraction"] = (round(share, 3), src(
                f"ldmatrix.x4 loads on half the warps at {KERNEL_WARPS_PER_SM} warps per SM: "
                f"{rates['loads_alone']:.1f} B/clk per SM alone, {rates['loads_beside_fills']:.1f} while the other "
                f"half cp.async {rates['fills']:.1f} B/clk of L2-resident data into shared memory; the loss per "
                f"filled byte{by_tma}, {r['ldsm_form']['how']}"))
    if "red_dq" in r:
        rd = r["red_dq"]  # each block into a tile of its own: the slices' rate without same-address contention
        p["l2_atomic_bytes_per_s"] = (
            float(f"{rd['own_tile_bytes_per_s']:.3g}"),
            src(f"fp32 reductions, one tile per block (per second: the L2 keeps its own clock), {rd['how']}"),
        )
    if "frag_store_sms" in r:
        f = r["frag_store_sms"]
        frag = sorted((x for x in f["points"] if x["form"] == "fragments"), key=lambda x: x["blocks"])
        # the SM's own rate where the chip's does not bind (at most half the SMs), the chip's on all of them
        alone = [x["bytes_per_clk_per_sm"] for x in frag if 2 * x["blocks"] <= frag[-1]["blocks"]]
        p["fragment_store_bytes_per_clk_per_sm"] = (round(statistics.median(alone), 1), src(
            f"the median on at most half the SMs (the SM's own rate), {f['how']}"))
        chip = frag[-1]["chip_bytes_per_s"]
        p["fragment_store_chip_bytes_per_s"] = (float(f"{chip:.3g}"),
                                                 src(f"on all the SMs (the chip's rate), {f['how']}"))
    if "wgmma" in r:
        w = r["wgmma"]
        for dtype in ("fp16", "bf16", "fp8", "tf32"):
            p[f"wgmma_{dtype}_flops_per_clk_per_sm"] = (w[f"{dtype}_flops_per_clk_per_sm"], src(w["how"]))
        p["wgmma_latency_cycles"] = (round(w["bf16_latency_cycles"]), src(f"bf16 m64n256k16, {w['how']}"))
    if "cp_async" in r:
        c = r["cp_async"]
        p["cp_async_issue_cycles"] = (max(1, round(c["issue_cycles_per_warp_instr"])), src(c["how"]))
    if "tma" in r and "latency" in r:
        t = r["tma"]
        p["tma_issue_cycles"] = (max(1, round(t["issue_cycles_16B"])), src(f"issue of 16 B bulk copies, {t['how']}"))
        # The profile adds this to the L2/HBM latency of the bytes moved: the small copy's round trip less the
        # pointer-chase L2 hit latency.
        extra = t["latency_cycles_256B"] - r["latency"]["l2_hit_cycles"]
        p["tma_latency_cycles"] = (
            max(1, round(extra)),
            src(
                f"256 B bulk-copy round trip from L2 ({t['latency_cycles_256B']:.0f} cycles) less the L2 hit "
                f"latency ({r['latency']['l2_hit_cycles']:.0f}), {t['how']}"
            ),
        )
    if "launch" in r:
        la = r["launch"]
        p["launch_overhead_s"] = (la["launch_overhead_s"], src(la["how"]))
        p["cta_launch_cycles"] = (max(1, round(la["cta_launch_cycles"])), src(la["how"]))
    if "softmax_gemm" in r:
        p.update(_steal_params(r["softmax_gemm"], base_profile_for(prov["gpu"], int(gpu["major"])), src))
    return p


def _steal_params(sg: dict, base: str, src) -> dict[str, tuple[float, str]]:
    """The shares of the elementwise pipes a running wgmma takes, fitted through the issue model (on the
    shipped profile of this GPU) to the softmax's measured slowdowns beside SS and RS streams."""
    from flashsim.hw_profiles import load_profile

    from .calibrate_softmax import fit_mma_sync, fit_steal

    profile = load_profile(base)
    out = {}
    for form, mixes in (("ss", ((1, 1), (1, 2), (2, 1))), ("rs", ((1, 1),))):
        value = fit_steal(sg["points"], profile, form, mixes)
        out[f"wgmma_{form}_pipe_steal_fraction"] = (value, src(
            f"the issue model's share that reproduces the softmax's slowdowns beside wgmma {form.upper()} streams "
            f"(experiments/calibrate_softmax.py fit_steal, mixes {list(mixes)}), {sg['how']}"))
    if any(p["gemm_form"] == "mma" for p in sg["points"]):
        cycles, steal = fit_mma_sync(sg["points"], profile)
        how = ("the issue model's pair that slows both sides of the mma.sync mixes as measured (the GEMMs' rate and "
               "the softmax's time beside each other, each over its own alone; experiments/calibrate_softmax.py "
               f"fit_mma_sync), {sg['how']}")
        out["mma_sync_issue_cycles"] = (cycles, src(how))
        out["mma_sync_pipe_steal_fraction"] = (steal, src(how))
    return out


def _toml_value(v: int | float) -> str:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise FlashsimError(f"calibration produced a value TOML cannot hold: {v!r}")
    if isinstance(v, int):
        return str(v)
    text = f"{v:.6g}"
    return text if any(ch in text for ch in ".en") else text + ".0"


def toml_text(report: dict, params: dict[str, tuple[int | float, str]]) -> str:
    prov, gpu = report["provenance"], report["gpu"]
    base = base_profile_for(prov["gpu"], int(gpu["major"]))
    description = f"{prov['gpu']} as measured by flashsim calibrate, {prov['date']}"
    lines = [
        f"# {prov['gpu']} calibrated by microbenchmarks (kernels/microbench): `{prov['command']}`, {prov['date']}.",
        f"# Driver {prov['driver']}, CUDA runtime {prov['cuda_runtime']}, torch {prov.get('torch')}. Parameters not",
        f"# listed are inherited from {base} with their own sources. Raw numbers: {JSON_NAME}.",
        f'name = "{base.split("-")[0]}-calibrated"',
        f'based_on = "{base}"',
        f"description = {json.dumps(description)}",
        "",
        "[params]",
    ]
    for key, (value, source) in params.items():
        lines.append(f"{key} = {{ value = {_toml_value(value)}, source = {json.dumps(source)} }}")
    for name, err in report.get("errors", {}).items():
        lines.append(f"# not measured: {name}: {err}")
    return "\n".join(lines) + "\n"


def write(report: dict, out_dir: Path) -> tuple[Path, Path]:
    """Write calibration.json and calibration.toml; the TOML is loaded back to check it is a valid profile."""
    from flashsim.hw_profiles import load_profile

    out_dir.mkdir(parents=True, exist_ok=True)
    params = to_params(report)
    json_path, toml_path = out_dir / JSON_NAME, out_dir / TOML_NAME
    json_path.write_text(json.dumps({**report, "params": {k: v for k, (v, _) in params.items()}}, indent=2) + "\n")
    toml_path.write_text(toml_text(report, params))
    load_profile(toml_path)  # raises a ProfileError naming the key if a measurement is inconsistent
    return json_path, toml_path


def load_report(path: Path) -> dict:
    """A calibration.json written earlier: its raw numbers make the TOML again without a GPU."""
    try:
        report = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise FlashsimError(f"cannot read calibration results {path}: {exc}") from None
    for key in ("provenance", "gpu", "results"):
        if key not in report:
            raise FlashsimError(f"{path} is not a calibration.json (no {key!r})")
    report.pop("params", None)
    report.setdefault("errors", {})
    return report


def main(args) -> int:
    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    if args.reps < 3:
        raise FlashsimError(f"--reps must be at least 3, got {args.reps}")
    report = load_report(Path(args.from_json)) if args.from_json else run(names, quick=args.quick, reps=args.reps)
    json_path, toml_path = write(report, Path(args.out_dir))
    params = to_params(report)
    if args.json:
        print(
            json.dumps(
                {
                    "files": [str(json_path), str(toml_path)],
                    "params": {k: v for k, (v, _) in params.items()},
                    "errors": report["errors"],
                },
                indent=2,
            )
        )
        return 0 if not report["errors"] else 1
    print(summary_text(params, report["errors"]))
    for line in checks_text(report):
        print(line)
    print(f"wrote {toml_path} and {json_path}")
    return 0 if not report["errors"] else 1


def checks_text(report: dict) -> list[str]:
    """Measurements that check a modelling choice rather than set a parameter: HBM latency under load
    (the model keeps it fixed; see docs/MODEL.md)."""
    points = report["results"].get("loaded_latency", {}).get("points", [])
    if not points:
        return []
    cells = [f"{p['chase_cycles']:.0f} cycles at {p['read_bytes_per_s'] / 1e12:.1f} TB/s" for p in points]
    return ["HBM latency beside streaming reads: " + ", ".join(cells)]


def summary_text(params: dict[str, tuple[int | float, str]], errors: dict[str, str]) -> str:
    from flashsim.hw_profiles.commands import human

    width = max(len(k) for k in params) if params else 10
    rows = [f"{k:<{width}}  {human(k, v)}" for k, (v, _) in params.items()]
    rows += [f"not measured: {k}: {e}" for k, e in errors.items()]
    return "\n".join(rows)
