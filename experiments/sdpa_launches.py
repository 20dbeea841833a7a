"""What SDPA's fused backends launch for each shape of a development grid: kernel name, grid, block, dynamic
shared memory and registers, read from the PyTorch profiler's trace (one call per shape and backend after a
warm-up). The kernel names carry the tiles the library picked (cuDNN: `..._knob_7_64x128x64_4x1x1_...`;
FA2: its kernel traits), which is how the simulator learns each library's tile rule from development shapes.

    python3 -m flashsim.experiments.sdpa_launches --grid dev-llm --out launches.json
    python3 -m flashsim.experiments.sdpa_launches --summary launches.json

Needs a CUDA GPU and torch (the --summary form does not).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import Counter

BACKENDS = {"sdpa-cudnn": "CUDNN_ATTENTION", "sdpa-flash": "FLASH_ATTENTION"}
# cuDNN's fused forward names its tile as BMxBNxD and its warp layout, e.g. ..._knob_7_64x128x64_4x1x1_...
CUDNN_TILE = re.compile(r"knob_(\d+)_(\d+)x(\d+)x(\d+)_(\d+)x(\d+)x(\d+)")


def trace_events(prof) -> list[dict]:
    """The raw events of a finished torch.profiler run (its Chrome trace, which carries each kernel's launch
    geometry and each memset's bytes)."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f).get("traceEvents", [])
    finally:
        os.unlink(path)


def _kernel_events(events: list[dict]) -> list[dict]:
    out = []
    for e in events:
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        out.append({"name": e.get("name", ""), "grid": a.get("grid"), "block": a.get("block"),
                    "dynamic_smem_bytes": a.get("shared memory"), "registers": a.get("registers per thread"),
                    "blocks_per_sm": a.get("blocks per SM"), "warps_per_sm": a.get("warps per SM"),
                    "occupancy_pct": a.get("est. achieved occupancy %"), "duration_us": e.get("dur")})  # fmt: skip
    return out


def launches(cfg, backend: str) -> list[dict]:
    """The kernels one SDPA call of `backend` launches on cfg (after two warm-up calls)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    from .validate_impls import inputs

    q, k, v = inputs(cfg)
    gqa = cfg.hkv != cfg.heads
    with sdpa_kernel([getattr(SDPBackend, backend)]):
        call = lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
            q, k, v, is_causal=cfg.causal, enable_gqa=gqa
        )
        for _ in range(2):
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
    return _kernel_events(trace_events(prof))


def measure(grid: str, impls: list[str]) -> list[dict]:
    from .validate import GRIDS

    rows = []
    for cfg in GRIDS[grid]():
        for impl in impls:
            row = {"config_id": cfg.id, "impl": impl, "config": cfg.problem_dict("bf16")}
            try:
                row["kernels"] = launches(cfg, BACKENDS[impl])
            except Exception as exc:  # a backend that refuses the shape: say so and go on
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)
            print(
                json.dumps(
                    {k: row.get(k) for k in ("config_id", "impl", "error")}
                    | {"kernels": [x["name"][:90] for x in row.get("kernels", [])]}
                ),
                flush=True,
            )
    return rows


def cudnn_tile(name: str) -> dict | None:
    m = CUDNN_TILE.search(name)
    if not m:
        return None
    knob, bm, bn, d, wx, wy, wz = (int(x) for x in m.groups())
    return {"knob": knob, "block_m": bm, "block_n": bn, "headdim": d, "warp_layout": [wx, wy, wz]}


def summary(rows: list[dict]) -> str:
    """One line per distinct (implementation, main kernel, block, smem): how many shapes launched it."""
    seen = Counter()
    for r in rows:
        for k in r.get("kernels", []):
            if "Memset" in k["name"] or "memset" in k["name"]:
                continue
            seen[(r["impl"], k["name"][:120], str(k["block"]), k["dynamic_smem_bytes"], k["registers"])] += 1
    return "\n".join(f"{n:4d}  {impl}  block {blk}  smem {sm}  regs {rg}  {name}"
                     for (impl, name, blk, sm, rg), n in seen.most_common())  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="dev-llm")
    ap.add_argument("--impls", default=",".join(BACKENDS))
    ap.add_argument("--out")
    ap.add_argument("--summary", metavar="FILE", help="summarise a file this tool wrote, then exit")
    args = ap.parse_args(argv)
    if args.summary:
        with open(args.summary) as f:
            print(summary(json.load(f)["rows"]))
        return 0
    from .validate import GRIDS

    if args.grid not in GRIDS:
        print(f"sdpa_launches: unknown grid {args.grid!r} (choose from {', '.join(GRIDS)})", file=sys.stderr)
        return 2
    impls = args.impls.split(",")
    if bad := [i for i in impls if i not in BACKENDS]:
        print(f"sdpa_launches: unknown implementation {bad[0]!r} (choose from {', '.join(BACKENDS)})", file=sys.stderr)
        return 2
    from .torch_provenance import torch_gpu_provenance

    rows = measure(args.grid, impls)
    command = "python3 -m flashsim.experiments.sdpa_launches " + " ".join(argv if argv is not None else sys.argv[1:])
    doc = {"provenance": torch_gpu_provenance(command), "grid": args.grid, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
