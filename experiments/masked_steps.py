"""What a causal kernel's masked K/V steps cost beyond the model's charge, read off the development sets.

    python3 -m flashsim.experiments.masked_steps [--impls sdpa-flash v2] [--min-share 0.2] [--count fa2] [--json]
    python3 -m flashsim.experiments.masked_steps --orders ORDERS.json --tiles S=2,4,8,1 PV=2,8,4,0 [--hw h200]

The first form: if a kernel's masked step costs (1 + x) unmasked steps where the model charges (1 + x_model),
a causal row whose K/V steps are a share f masked comes out short by about f (x - x_model) / (1 + f x), so
-e / ((1 + e) f) estimates x - x_model row by row (e: the committed relative error of GPU busy time). Rows of
one kernel whose estimates agree over shares from 0.1 to 0.7 point at a per-step cost the model lacks; a row
of small share says little (its estimate divides by f). It reads the development sets' committed reports
only (experiments/adoption_rule.DEV_SETS), never a test set.

The second form replays, with the profile's calibrated ldmatrix and tensor-pipe numbers (simulator/
gemm_replay.py), each GEMM stretch a kernel's SASS issues (`python3 -m flashsim.experiments.sass_orders SASS
--gemms` wrote ORDERS.json), at one and two blocks of 4 warps per SM: how much longer a stretch whose loads
sit right before their products (no registers to load ahead) takes than the loop's. --tiles names the warp
tile of each kind, (m16 tiles, n16 fragments, k-steps, A from shared memory 1/0): a stretch is matched to the
kind whose product and load counts it has; S's products split over two stretches are joined.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from flashsim.errors import FlashsimError

from .accuracy import SIDE_BY_SIDE, load
from .adoption_rule import DEV_SETS, RESULTS

COUNTS = ("geometry", "fa2")


def fa2_masking_steps(seqlen_q: int, seqlen_k: int, block_m: int, block_n: int) -> int:
    """The K/V steps a causal FA2 block runs through its masking code, counted back from the diagonal, as its
    source counts them (`n_masking_steps` in flash_fwd_kernel.h): ceil(block_m / block_n), one more where the
    lengths are not multiples of the tiles (its Is_even_MN=false instantiation)."""
    from flashsim.algorithms.schedules.forward_code import MASKING_STEPS

    return MASKING_STEPS["fa2"](block_m, block_n, seqlen_q % block_m == 0 and seqlen_k % block_n == 0)


def masked_share(problem: dict, block_m: int, block_n: int, count: str = "geometry") -> float:
    """The share of a causal problem's K/V steps (Q block x K/V block pairs visited) that are masked steps:
    those whose tile needs a mask (count "geometry", what our v2 masks) or those FA2 runs through its masking
    code (count "fa2", fa2_masking_steps: what the model runs SDPA flash's kernel with since session 51)."""
    from flashsim.algorithms.parts import kv_block_count, tile_mask
    from flashsim.algorithms.problem import Problem

    p = Problem(**problem)
    steps = masked = 0
    for b in range(p.batch if p.seqlens else 1):  # a batch of equal sequences: one stands for all
        ps = p.sequence(b)
        for row0 in range(0, ps.seqlen_q, block_m):
            n = kv_block_count(ps, row0, block_m, block_n)
            steps += n
            if count == "fa2":
                masked += min(n, fa2_masking_steps(ps.seqlen_q, ps.seqlen_k, block_m, block_n))
            else:
                masked += sum(1 for j in range(n) if tile_mask(ps, row0, j * block_n, block_m, block_n) is not None)
    return masked / steps if steps else 0.0


def rows(impls: list[str], count: str = "geometry") -> list[dict]:
    """Each predicted and measured causal development row of `impls`: set, config id, head dim, tiles (those its
    prediction ran), masked share, error and the estimate."""
    from .prediction_inputs import problem_args

    out = []
    for ds in DEV_SETS:
        report = load(RESULTS / ds.report)
        for r in report["rows"]:
            if not (r["impl"] in impls and r["config"].get("causal") and (r.get("measured") or {}).get(SIDE_BY_SIDE)
                    and (r.get("predicted") or {}).get(SIDE_BY_SIDE) and (r.get("sim") or {}).get("tiling")):
                continue
            tiles = r["sim"]["tiling"]
            share = masked_share(problem_args(r["config"], r.get("sim_headdim")), tiles["block_m"], tiles["block_n"],
                                 count)
            err = r["predicted"][SIDE_BY_SIDE] / r["measured"][SIDE_BY_SIDE] - 1
            out.append({"set": ds.name, "config_id": r["config_id"], "impl": r["impl"],
                        "headdim": r["config"]["headdim"], "tile": f"{tiles['block_m']}x{tiles['block_n']}",
                        "masked_share": share, "error": err,
                        "extra_per_masked_step": -err / ((1 + err) * share) if share else None})
    return sorted(out, key=lambda x: (x["impl"], -x["masked_share"]))


def summary(table: list[dict], min_share: float) -> dict:
    """Per implementation and head dim: rows with masked share >= min_share and the median of their estimates."""
    out: dict = {}
    for x in table:
        if x["masked_share"] >= min_share:
            out.setdefault(x["impl"], {}).setdefault(str(x["headdim"]), []).append(x["extra_per_masked_step"])
    return {impl: {d: {"rows": len(v), "median_extra": statistics.median(v), "min": min(v), "max": max(v)}
                   for d, v in by_d.items()} for impl, by_d in out.items()}


def replayed(orders: list[str], tiles: dict[str, tuple], profile) -> list[dict]:
    """Each GEMM stretch's replay (cycles at 4 and 8 warps per SM) with its kind; S split in two is joined."""
    from flashsim.simulator.gemm_replay import FRAGMENT_BYTES, program, replay
    from flashsim.simulator.instructions import HMMA_FLOPS

    port = FRAGMENT_BYTES / profile.smem_bandwidth_bytes_per_clk_per_sm
    hmma = HMMA_FLOPS["bf16"] * profile.sub_partitions_per_sm / profile.tensor_flops_per_clk_per_sm("mma_sync", "bf16")
    # a tile's (products, loads): m16 x n8 products per k-step; A's fragments (when from shared memory) and B's
    shapes = {(2 * mt * nt2 * ks, (mt * a + nt2) * ks): (kind, (mt, nt2, ks, bool(a)))
              for kind, (mt, nt2, ks, a) in tiles.items()}
    most = max(m for m, _ in shapes)
    out, pending = [], ""
    for order in orders:
        pending += order
        match = shapes.get((pending.count("m"), pending.count("L")))
        if match is None:
            if pending.count("m") >= most:
                raise FlashsimError(f"a GEMM stretch of {pending.count('m')} products and {pending.count('L')} "
                                    "loads fits no tile of --tiles")
            continue
        kind, tile = match
        prog = program(pending, *tile)
        out.append({"kind": kind, "order": pending, "loads": pending.count("L"),
                    "cycles": {w: replay(prog, w, port, hmma, profile.ldsm_data_latency_cycles) for w in (4, 8)}})
        pending = ""
    return out


def _tiles(specs: list[str]) -> dict[str, tuple]:
    out = {}
    for spec in specs:
        kind, _, nums = spec.partition("=")
        try:
            mt, nt2, ks, a = (int(v) for v in nums.split(","))
        except ValueError:
            raise FlashsimError(f"--tiles {spec!r}: want KIND=M16,N16,KSTEPS,A_SMEM (four integers)") from None
        out[kind] = (mt, nt2, ks, a)
    return out


def _replay_report(args) -> int:
    from pathlib import Path

    from flashsim.hw_profiles import load_profile

    try:
        kernels = json.loads(Path(args.orders).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise FlashsimError(f"--orders {args.orders}: {exc}") from None
    profile = load_profile(args.hw)
    result = {name: replayed(orders, _tiles(args.tiles), profile) for name, orders in kernels.items()}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for name, stretches in result.items():
        print(f"{name[:100]}\n| # | GEMM | loads | order (first 48) | cycles, 4 warps | 8 warps |")
        print("|---|---|---|---|---|---|")
        for i, s in enumerate(stretches):
            print(f"| {i} | {s['kind']} | {s['loads']} | `{s['order'][:48]}` | {s['cycles'][4]:.0f} | "
                  f"{s['cycles'][8]:.0f} |")
    return 0


def _table_report(args) -> int:
    table = rows(args.impls, args.count)
    result = {"rows": table, "summary": summary(table, args.min_share), "min_share": args.min_share,
              "count": args.count}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print("| implementation | set | config | tile | masked share | error | extra per masked step |")
    print("|---|---|---|---|---|---|---|")
    for x in table:
        extra = "" if x["extra_per_masked_step"] is None else f"{x['extra_per_masked_step']:+.2f}"
        print(f"| {x['impl']} | {x['set']} | {x['config_id']} | {x['tile']} | {x['masked_share']:.3f} | "
              f"{100 * x['error']:+.1f}% | {extra} |")
    print(f"\nrows of masked share >= {args.min_share}: median estimate of the cost per masked step the model lacks")
    for impl, by_d in result["summary"].items():
        for d, s in sorted(by_d.items(), key=lambda kv: int(kv[0])):
            print(f"  {impl} d{d}: {s['median_extra']:+.2f} ({s['rows']} rows, {s['min']:+.2f} .. {s['max']:+.2f})")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.masked_steps",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--impls", nargs="+", default=["sdpa-flash", "v2"])
    ap.add_argument("--min-share", type=float, default=0.2)
    ap.add_argument("--count", choices=COUNTS, default="geometry",
                    help="which steps are masked: those whose tile needs a mask (geometry, the model's) or those "
                    "FA2 runs through its masking code (fa2: its source's n_masking_steps)")
    ap.add_argument("--orders", help="sass_orders --gemms output of one kernel's SASS")
    ap.add_argument("--tiles", nargs="+", default=["S=2,4,8,1", "PV=2,8,4,0"])
    ap.add_argument("--hw", default="h200")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        return _replay_report(args) if args.orders else _table_report(args)
    except FlashsimError as exc:
        print(f"masked_steps: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
