"""The simulator's prediction of hbm_probe's points (experiments/hbm_probe.py): the probe's ring_read kernel
written as a tile program (each block reads its own K and V halves through a ring of `stages` (K, V) tile
pairs, stages - 1 in flight, no math) and replayed on the whole chip.

The simulator places a grid's blocks as the hardware does when shared memory lets k of them share an SM: the
first sm_count blocks one per SM, the next ones on the first SMs again. A point that reads on fewer SMs than
the chip has is the same grid on a profile of that many SMs (idle SMs take no part in the memory system).

    python3 -m flashsim.experiments.hbm_probe_model [--probe FILE] [--hw h200] [--sweeps sms,uneven]
prints measured and predicted bandwidth per point.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from flashsim.algorithms.ir import SMEM, GTile, Kernel, Load, Role, SyncThreads, Wait

ROW_BYTES = 256  # a K/V row at d128 in bf16: tiles are rows x 128 columns of 2 bytes
PROBE = Path(__file__).resolve().parent / "results" / "h200" / "decode-hbm" / "hbm-probe.json"


def probe_kernel(blocks: int, stages: int, tile_bytes: int, block_bytes: int, smem_bytes: int) -> Kernel:
    """ring_read_s<stages> as a kernel of `blocks` working blocks of 4 warps."""
    rows = tile_bytes // ROW_BYTES
    tiles = block_bytes // 2 // tile_bytes

    def program(cta):
        (w,) = cta

        def copy(t):
            for tensor in ("K", "V"):
                yield Load(GTile(tensor, w, 0, t * rows, rows, 0, 128, 2), f"s{tensor}{t % stages}", SMEM,
                           "cp.async", "kv")  # fmt: skip

        for t in range(min(stages - 1, tiles)):
            yield from copy(t)
        for t in range(tiles):
            yield Wait("kv", 2 * (t + 1))
            yield SyncThreads()
            if t + stages - 1 < tiles:
                yield from copy(t + stages - 1)

    return Kernel(f"ring_read_s{stages}", [(w,) for w in range(blocks)], (Role("warps", 4, program),), smem_bytes, 32,
                  uniform=True, kv_head_of=lambda c: (c[0], 0))  # fmt: skip


def predict(row: dict, profile) -> float:
    """Simulated microseconds of one probe point (the hardware's own placement for `grid` points, the row's
    SMs x blocks otherwise)."""
    from flashsim.simulator.api import _counters
    from flashsim.simulator.gpu import Gpu

    by = {int(k): v for k, v in row["sms_by_blocks"].items()}
    sms = sum(by.values())
    if row["sweep"] in ("natural", "fixed") or sms == profile.sm_count:
        machine = profile
    else:
        machine = profile.with_overrides({"sm_count": sms})
    kernel = probe_kernel(row["blocks"], row["stages"], row["tile_bytes"], row["block_bytes"], row["smem_bytes"])
    gpu = Gpu(machine, None)
    gpu.flushed_l2()  # the probe flushes L2 before each call
    gpu.set_clock(machine.sm_clock_hz)
    cycles, _, _ = gpu.run_kernel(kernel, lambda: _counters(gpu), extrapolate=True)
    return cycles / gpu.clock_hz * 1e6


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe", type=Path, default=PROBE)
    ap.add_argument("--hw", default="h200")
    ap.add_argument("--sweeps", default="sms,inflight,uneven,natural")
    ap.add_argument("--set", nargs="*", default=[], help="profile overrides, key=value")
    args = ap.parse_args(argv)
    from flashsim.hw_profiles import load_profile

    profile = load_profile(args.hw, args.set)
    rows = json.loads(args.probe.read_text())["rows"]
    errs = []
    for r in rows:
        if r["sweep"] not in args.sweeps.split(",") or not r["block_bytes"] or not r["blocks"]:
            continue
        us = predict(r, profile)
        err = us / r["gpu_us"] - 1
        errs.append(err)
        print(f"{r['sweep']:8} {r['note']:22} s{r['stages']} t{r['tile_bytes'] // 1024:>2}K k{r['k_max']} "
              f"blocks {r['blocks']:>3} {r['sms_by_blocks']}  meas {r['tb_s']:.3f} TB/s {r['gpu_us']:8.1f} us  "
              f"pred {r['total_bytes'] / us / 1e6:.3f} TB/s {us:8.1f} us  {100 * err:+.1f}%", flush=True)  # fmt: skip
    if errs:
        print(
            f"{len(errs)} points: MAPE {100 * statistics.fmean(abs(e) for e in errs):.1f}%, "
            f"bias {100 * statistics.fmean(errs):+.1f}%"
        )


if __name__ == "__main__":
    main()
