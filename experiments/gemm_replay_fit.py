"""The ldmatrix latency of the GEMM replay (simulator/gemm_replay.py), fitted to the ldsm_form sweep's tiles.

    python3 -m flashsim.experiments.gemm_replay_fit CALIBRATION.json ORDERS_DIR [OUT_DIR]

CALIBRATION.json holds `calibrate --only ldsm_form` points; ORDERS_DIR the issue orders read off the SASS
(experiments/sass_orders.py): ldsm-form-tile-orders.json (the sweep's timed loops) and, to compare the replay
of each kernel's own order with a generated one, v2-, v1- and fa2-gemm-orders.json (our kernels' cubins; SDPA
flash's from Nsight Compute's source pages at d64, d128 and d256). Each tile
point is replayed with its loop's order (8 k-steps unrolled, run 2 and 6 times: the difference is the steady
cost); the one latency with the least RMS relative error over all points is the profile's
ldsm_data_latency_cycles. Writes gemm-replay.md and gemm-replay.json.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from flashsim.hw_profiles import load_profile
from flashsim.simulator.gemm_replay import FRAGMENT_BYTES, issue_order, program, replay

from .calibrate_ldsm import TILE_KERNELS

LOOP_KSTEPS = 8  # k-steps per iteration of the sweep's loop
SHIPPED_LATENCY = 43.0  # the profile's mma_sync_ldsm_latency_cycles of the closed form (ldsm_model 1)
AHEAD = 8  # loads the generated order keeps in front of the products (our kernels' SASS: 8 to 12 at the start)


def rates(profile) -> tuple[float, float]:
    """(port cycles per fragment load, tensor-pipe cycles per m16n8k16 on one sub-partition)."""
    port = FRAGMENT_BYTES / profile.smem_bandwidth_bytes_per_clk_per_sm
    hmma = 2 * 16 * 8 * 16 / (profile.mma_sync_bf16_flops_per_clk_per_sm / 4)
    return port, hmma


def loop_kstep(order: str, tile: tuple, warps: int, port: float, hmma: float, latency: float) -> float:
    mt, nt2, a_smem = tile
    def run(times: int) -> float:
        return replay(program(order * times, mt, nt2, LOOP_KSTEPS * times, a_smem), warps, port, hmma, latency)
    return (run(6) - run(2)) / (4 * LOOP_KSTEPS)


def shipped_form(tile: tuple, warps: int, port: float, hmma: float) -> float:
    """ldsm_model 1's k-step: max(products alone, loads alone + L / n^2), n warps per sub-partition."""
    mt, nt2, a_smem = tile
    loads = (mt * a_smem + nt2) * warps * port
    products = 2 * mt * nt2 * hmma * warps / 4
    return max(products, loads + SHIPPED_LATENCY / (warps / 4) ** 2)


def tile(name: str) -> tuple[int, int, bool]:
    """(m16 tiles, n16 fragments, A from shared memory) of an ldsm_form tile kernel."""
    mt, nt2, a_from, _ = TILE_KERNELS[name]
    return mt, nt2, a_from != "regs"


def fit(points: list[dict], orders: dict, port: float, hmma: float) -> tuple[float, list[dict]]:
    """The latency (to 0.5 cycles) with the least RMS relative error: every 2 cycles from 10 to 60, then every
    half cycle around the best of those."""
    coarse = _best(points, orders, port, hmma, [float(x) for x in range(10, 61, 2)])[1]
    return _best(points, orders, port, hmma, [coarse + x / 2 for x in range(-3, 4)])[1:]


def _best(points, orders, port, hmma, latencies) -> tuple:
    best = None
    for latency in latencies:
        rows = []
        for p in points:
            shape = tile(p["kernel"])
            replayed = loop_kstep(orders[p["kernel"]], shape, p["warps_per_sm"], port, hmma, latency)
            rows.append({"kernel": p["kernel"], "warps_per_sm": p["warps_per_sm"],
                         "measured": p["cycles_per_warp_kstep"], "replay": replayed,
                         "shipped_form": shipped_form(shape, p["warps_per_sm"], port, hmma)})
        rms = (sum((r["replay"] / r["measured"] - 1) ** 2 for r in rows) / len(rows)) ** 0.5
        if best is None or rms < best[0]:
            best = (rms, latency, rows)
    return best


def _split_q(d: int, br: int, bc: int, w: int) -> list[tuple]:
    """FA2-class forward GEMMs: each warp br / w rows; S = Q K^T, then P V with P in registers."""
    mt = br // w // 16
    return [("S", (mt, bc // 16, d // 16, True)), ("PV", (mt, d // 16, bc // 16, False))]


def _split_keys(d: int, br: int, bc: int, w: int) -> list[tuple]:
    """V1's S: 16 query rows, the key block's columns dealt over the warps (its P V stretches are not kept)."""
    return [("S", (1, bc // w // 16, d // 16, True))]


# orders file prefix -> the warp tiles of its kernels' GEMMs
LAYOUTS = {"v2": _split_q, "fa2": _split_q, "v1": _split_keys}


def kernel_gemms(orders_dir: Path, port: float, hmma: float, latency: float, ahead: int) -> list[dict]:
    """Our kernels' GEMMs: their SASS order replayed against the generated order, at one and two blocks."""
    rows = []
    for family, layout in LAYOUTS.items():
        path = orders_dir / f"{family}-gemm-orders.json"
        if not path.is_file():
            continue
        for name, gemms in json.loads(path.read_text()).items():
            d, br, bc, w = map(int, re.search(r"_d(\d+)_\w+?_(\d+)x(\d+)w(\d+)", name).groups())
            shapes = layout(d, br, bc, w)
            for (gemm, shape), order in zip(shapes, gemms, strict=False):  # V1 has more stretches
                for warps in (w, 2 * w):
                    sass = replay(program(order, *shape), warps, port, hmma, latency)
                    gen = replay(program(issue_order(*shape, ahead), *shape), warps, port, hmma, latency)
                    mt, nt2, ksteps, a_smem = shape
                    form = ksteps * shipped_form((mt, nt2, a_smem), warps, port, hmma)
                    rows.append({"kernel": name, "gemm": gem_label(gemm, shape), "warps_per_sm": warps,
                                 "sass_order": sass, "generated_order": gen, "shipped_form": form,
                                 "prologue_loads": len(order) - len(order.lstrip("L")),
                                 "steady_ahead": steady_ahead(order, shape)})
    return rows


def steady_ahead(order: str, shape: tuple) -> float:
    """Loads a kernel's order has issued past the one each product needs, averaged over the middle half of its
    products (the prologue and the drain left out): how far ahead its compiler keeps them."""
    issued, ahead = 0, []
    for need in program(order, *shape):
        if need < 0:
            issued += 1
        else:
            ahead.append(issued - 1 - need)
    middle = ahead[len(ahead) // 4: 3 * len(ahead) // 4] or ahead
    return sum(middle) / len(middle)


def gem_label(gemm: str, shape: tuple) -> str:
    mt, nt2, ksteps, a_smem = shape
    return f"{gemm} ({mt} x {nt2} fragments, {ksteps} k-steps{'' if a_smem else ', A in registers'})"


def write(out: Path, latency: float, rows: list[dict], kernels: list[dict], port: float, hmma: float,
          ahead: int) -> None:
    def err(a, b):
        return f"{100 * (a / b - 1):+.1f}%"
    rms = lambda key: (sum((r[key] / r["measured"] - 1) ** 2 for r in rows) / len(rows)) ** 0.5  # noqa: E731
    worst = lambda key: max(abs(r[key] / r["measured"] - 1) for r in rows)  # noqa: E731
    lines = [
        "# The GEMM replay against the ldsm_form sweep's tiles",
        "",
        f"Port {port:.3f} cycles per ldmatrix.x4 (512 B at the profile's shared-memory bytes per cycle), "
        f"{hmma:.3f} cycles per m16n8k16 on a sub-partition's pipe (the profile's mma.sync bf16 rate / 4); "
        f"fitted latency **{latency:g} cycles** from leaving the port to the fragment being usable.",
        "",
        f"Over the {len(rows)} tile points: replay RMS {100 * rms('replay'):.1f}%, max {100 * worst('replay'):.1f}%; "
        f"the closed form of ldsm_model 1 (L = {SHIPPED_LATENCY:g}) RMS {100 * rms('shipped_form'):.1f}%, "
        f"max {100 * worst('shipped_form'):.1f}%.",
        "",
        "| tile | warps/SM | measured | replay | err | ldsm_model 1 | err |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['kernel']} | {r['warps_per_sm']} | {r['measured']:.1f} | {r['replay']:.1f} | "
                     f"{err(r['replay'], r['measured'])} | {r['shipped_form']:.1f} | "
                     f"{err(r['shipped_form'], r['measured'])} |")
    if kernels:
        lines += ["", f"## Our kernels' GEMMs: their SASS order against the generated one (ahead = {ahead})", "",
                  "Cycles of one GEMM alone at one and two blocks per SM (no measurement: the replay of each order, "
                  "and ldsm_model 1's closed form). Loads ahead: how many loads past the one a product needs the "
                  "kernel's order has issued, over the middle half of its products.", "",
                  "| kernel | GEMM | warps/SM | prologue loads | loads ahead | SASS order | generated | vs SASS | "
                  "ldsm_model 1 | vs SASS |", "|---|---|---|---|---|---|---|---|---|---|"]
        for k in kernels:
            lines.append(f"| {k['kernel']} | {k['gemm']} | {k['warps_per_sm']} | {k['prologue_loads']} | "
                         f"{k['steady_ahead']:.1f} | "
                         f"{k['sass_order']:.0f} | {k['generated_order']:.0f} | "
                         f"{err(k['generated_order'], k['sass_order'])} | {k['shipped_form']:.0f} | "
                         f"{err(k['shipped_form'], k['sass_order'])} |")
    (out / "gemm-replay.md").write_text("\n".join(lines) + "\n")
    (out / "gemm-replay.json").write_text(json.dumps(
        {"latency_cycles": latency, "port_cycles": port, "hmma_cycles": hmma, "ahead": ahead, "tiles": rows,
         "kernels": kernels}, indent=1) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    calibration, orders_dir = Path(argv[0]), Path(argv[1])
    out = Path(argv[2]) if len(argv) > 2 else orders_dir
    points = [p for p in json.loads(calibration.read_text())["results"]["ldsm_form"]["points"]
              if p["kind"] == "tile" and "cycles_per_warp_kstep" in p and p["kernel"] in TILE_KERNELS]
    orders = json.loads((orders_dir / "ldsm-form-tile-orders.json").read_text())
    profile = load_profile("h200")
    port, hmma = rates(profile)
    latency, rows = fit(points, orders, port, hmma)
    ahead = AHEAD
    kernels = kernel_gemms(orders_dir, port, hmma, latency, ahead)
    write(out, latency, rows, kernels, port, hmma, ahead)
    print(f"latency {latency:g} cycles; {out / 'gemm-replay.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
