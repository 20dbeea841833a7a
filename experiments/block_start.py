"""What a thread block spends before its first copy, taken apart (kernels/microbench/block_start.cu).

Our v3's producer takes 1.5-1.9 k cycles from entry to issuing Q's copy, and the simulator issues it at once
(phase stamps, session 32: the barriers' set-up 0.36-0.46 k, setmaxnreg 0.14 k, picking the tile 0.8-1.2 k).
Our v2's first wave waits on the constant cache for 3-5% of its warps' lives. This times the pieces apart, on one
SM and on all of them, after validate's write flush (the constant bank written again before the launch, as a
launch writes its parameters) and in a second launch straight after:
- param_chain: the kernel's first parameter read, then a chain of 32 dependent constant-bank reads (LDC with a
  register offset, a 64-byte line each), cold, then the same chain again, warm;
- barrier_setup: one thread initialising 4, 8 or 12 mbarriers, the fence that publishes them, the block's barrier;
- regs_realloc: setmaxnreg, the producer warpgroup lowering its registers and two consumers raising theirs;
- index_chain: the tile scheduler's divisions and remainders by runtime values, 16 tiles in a row.

    python3 -m flashsim.experiments.block_start [--out FILE]
writes FILE (default experiments/results/h200/block-start.json) and prints each point's median cycles.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

REPS = 7
BLOCKS = (1, 132)
CHAIN_WORDS, LINE_WORDS, STEPS = 512, 16, 32
PROTOCOLS = ("write flush", "relaunch")


def chain() -> np.ndarray:
    """next[i]: the index read after i, one 64-byte line further each step, back to 0 after the last."""
    nxt = np.zeros(CHAIN_WORDS, dtype=np.int32)
    for k in range(STEPS):
        nxt[k * LINE_WORDS] = ((k + 1) % STEPS) * LINE_WORDS
    return nxt


def _medians(samples: list[np.ndarray], names: tuple[str, ...]) -> dict:
    """Per quantity, the median over calls of the median over blocks (and the per-call values)."""
    out = {}
    for k, name in enumerate(names):
        per_call = [float(np.median(s[:, k])) for s in samples]
        out[name] = {"median": statistics.median(per_call), "calls": per_call}
    return out


def measure(cp, module, flush, kernel: str, blocks: int, protocol: str, **kw) -> dict:
    fn = module.get_function(kernel)
    out = cp.zeros(blocks * 4, dtype=cp.int64)
    bank = module.get_global("chain_next")
    nxt = cp.asarray(chain())
    threads = 384 if kernel == "regs_realloc" else 128
    args = {"param_chain": lambda: (np.int32(STEPS), out, cp.zeros(1, dtype=cp.int32)),
            "barrier_setup": lambda: (np.int32(kw.get("nbar", 8)), out),
            "regs_realloc": lambda: (out,),
            "index_chain": lambda: (np.int32(kw.get("mblocks", 1)), np.int32(64), np.int32(8), np.int32(16), out)}
    bank.copy_from_device(nxt.data, nxt.nbytes)
    samples = []
    for _ in range(REPS):
        if protocol == "write flush":
            flush()
            bank.copy_from_device(nxt.data, nxt.nbytes)
        else:
            fn((blocks,), (threads,), args[kernel]())
        fn((blocks,), (threads,), args[kernel]())
        cp.cuda.Device().synchronize()
        samples.append(out.get().reshape(blocks, 4))
    names = {"param_chain": ("first_param", "chain_cold", "chain_warm"),
             "barrier_setup": ("inits_issued", "fence_past", "barrier_past"),
             "regs_realloc": ("producer_lowered", "consumer_raised", "barrier_past"),
             "index_chain": ("cycles",)}[kernel]
    row = {"kernel": kernel, "blocks": blocks, "start": protocol, **kw, **_medians(samples, names)}
    if kernel == "param_chain":
        row["per_read_cold"] = row["chain_cold"]["median"] / STEPS
        row["per_read_warm"] = row["chain_warm"]["median"] / STEPS
    if kernel == "index_chain":
        row["per_tile"] = row["cycles"]["median"] / 16
    return row


def points():
    yield "param_chain", {}
    for nbar in (4, 8, 12):
        yield "barrier_setup", {"nbar": nbar}
    yield "regs_realloc", {}
    for mblocks in (1, 32):
        yield "index_chain", {"mblocks": mblocks}


def describe(row: dict) -> str:
    values = "  ".join(f"{k} {v['median']:7.0f}" for k, v in row.items() if isinstance(v, dict))
    extra = "".join(f" {k}={row[k]}" for k in ("nbar", "mblocks") if k in row)
    return f"{row['start']:11} {row['kernel']:13}{extra:10} on {row['blocks']:3} SMs: {values}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.block_start", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="experiments/results/h200/block-start.json")
    args = ap.parse_args(argv)
    from flashsim.errors import FlashsimError

    from .calibrate_gpu import load_module, read_gpu, require_gpu, write_rows
    from .validate import make_flush

    try:
        cp = require_gpu("block_start")
    except FlashsimError as exc:
        print(f"block_start: {exc}", file=sys.stderr)
        return 2
    gpu = read_gpu(cp)
    module = load_module(cp, "block_start", gpu.arch)
    flush = make_flush(cp, gpu)
    rows = []
    for protocol in PROTOCOLS:
        for kernel, kw in points():
            for blocks in BLOCKS:
                row = measure(cp, module, flush, kernel, blocks, protocol, **kw)
                rows.append(row)
                print(describe(row), flush=True)
    write_rows(args.out, cp, gpu, "block_start", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
