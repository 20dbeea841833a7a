"""What the first touch of a page costs after validate's L2 flush: address translation against the data miss.

Short kernels (one wave, 6-13 us) come out about 2 us faster than measured for every implementation, at any
clock (docs/MODEL.md, The clock a timing ran at). One candidate is the address translations of the
kernel's pages: were they evicted by the flush's 256 MiB, each page's first touch would wait for a page walk
through a cold L2 before its data miss even starts. This measures that apart from attention
(kernels/microbench/page_walk.cu):

- chase: one thread's dependent loads, `steps` of them, either each in a page not touched since the
  preparation (pages) or all in one page (lines), cycles per step;
- probe: one launch of `count` threads, each reading one line, in `count` distinct pages or within one page
  (GPU busy time of the launch, profiler).

Each is timed after each preparation: the write flush (validate's), the write flush then a primer that
touches one other line of every page of the buffer (translations warm, the measured lines still cold), the
read flush (a 256 MiB read: the L2 full of clean lines), the read flush then the primer, and warm (the same
walk again at once). write against write+prime is what a first touch pays for translation after the flush.

    python3 -m flashsim.experiments.first_touch [--out FILE]
writes FILE (default experiments/results/h200/first-touch.json) and prints the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

PAGE = 2 << 20  # the GPU's large page (cudaMalloc allocations of this size and more)
LINE = 128
BUFFER = 1 << 30  # 512 pages
STEPS = 48
REPS = 7
PROBE_COUNTS = (1, 16, 132, 512)
CONDITIONS = ("write", "write+prime", "read", "read+prime", "warm")


class Rig:
    """The buffer, the kernels and the preparations."""

    def __init__(self, cp, gpu):
        from .busy_protocol import make_flush_marker
        from .calibrate_bench import BLOCK_TIME
        from .calibrate_gpu import load_module
        from .validate import FLUSH_BYTES, make_flush

        self.cp = cp
        mod = load_module(cp, "page_walk", gpu.arch)
        self.chase_fn, self.touch_fn = mod.get_function("page_chase"), mod.get_function("touch_stride")
        self.write_flush = make_flush(cp, gpu)
        read = load_module(cp, "membw", gpu.arch).get_function("read_cg")
        big = cp.empty(FLUSH_BYTES, dtype=cp.uint8)
        self.sink = cp.zeros(1, dtype=cp.uint32)
        blocks = 4 * gpu.sm_count
        times = cp.empty(blocks * BLOCK_TIME.itemsize, dtype=cp.uint8)
        n16 = np.uint64(FLUSH_BYTES // 16)
        self.read_flush = lambda: read((blocks,), (512,), (big, n16, np.int32(1), self.sink, times))
        self.mark = make_flush_marker(cp, gpu, cp.empty(16, dtype=cp.uint8))
        raw = cp.zeros(BUFFER + PAGE, dtype=cp.uint8)
        skew = (-raw.data.ptr) % PAGE  # whole pages from here on
        self.raw = raw
        self.base = raw[skew : skew + BUFFER]
        self.words = self.base.view(cp.uint64)  # the chase's next[] lives in the buffer itself
        self.pages = BUFFER // PAGE
        self.end = cp.zeros(1, dtype=cp.uint64)
        self.cycles = cp.zeros(1, dtype=cp.int64)

    def prime(self) -> None:
        """One 16-byte read in the second half of every page: each page's translation used, its first half's
        lines (where the chase and the probe read) not brought in."""
        n = self.pages
        src = self.base[PAGE // 2 :]
        self.touch_fn((-(-n // 128),), (128,), (src, np.uint64(PAGE // 16), np.uint64(n), self.sink))

    def prepare(self, condition: str) -> None:
        if condition.startswith("write"):
            self.write_flush()
        elif condition.startswith("read"):
            self.mark()
            self.read_flush()
        else:
            self.mark()
        if condition.endswith("+prime"):
            self.prime()

    def chain(self, kind: str, rng) -> int:
        """Write a cycle of STEPS + 1 lines into the buffer: one line in each of STEPS + 1 distinct pages
        (pages) or STEPS + 1 lines of one page (lines), all in the pages' first halves. Returns its start."""
        words_per_line, words_per_page = LINE // 8, PAGE // 8
        half_lines = PAGE // 2 // LINE
        if kind == "pages":
            pages = rng.permutation(self.pages)[: STEPS + 1]
            lines = rng.integers(0, half_lines, STEPS + 1)
        else:
            pages = np.full(STEPS + 1, rng.integers(0, self.pages))
            lines = rng.permutation(half_lines)[: STEPS + 1]
        at = pages.astype(np.uint64) * words_per_page + lines.astype(np.uint64) * words_per_line
        self.words[:] = 0
        self.words[self.cp.asarray(at.astype(np.int64))] = self.cp.asarray(np.roll(at, -1))
        return int(at[0])

    def chase(self, start: int) -> float:
        self.chase_fn((1,), (1,), (self.words, np.uint64(start), np.int32(STEPS), self.end, self.cycles))
        self.cp.cuda.Device().synchronize()
        return int(self.cycles.get()[0]) / STEPS


def chase_rows(rig: Rig, rng) -> list[dict]:
    rows = []
    for kind in ("pages", "lines"):
        start = rig.chain(kind, rng)
        for condition in CONDITIONS:
            samples = []
            for _ in range(REPS):
                if condition == "warm":
                    rig.chase(start)  # the walk before: lines and translations in place
                rig.prepare(condition)
                samples.append(rig.chase(start))
            rows.append({"test": "chase", "kind": kind, "condition": condition, "steps": STEPS,
                         "cycles_per_step": samples, "median": statistics.median(samples)})
            print(f"chase {kind:6} {condition:12} {statistics.median(samples):8.1f} cycles/step", flush=True)
    return rows


def probe_rows(rig: Rig) -> list[dict]:
    """One launch of `count` one-line reads, in distinct pages (stride one page) or in one page (stride 4 KiB),
    its GPU busy time after each preparation (the profiler's duration of the last touch_stride of a call)."""
    from .validate import profiled_events

    rows = []
    for spread, stride in (("pages", PAGE), ("one page", 4096)):
        for count in PROBE_COUNTS:
            if spread == "one page" and count * stride > PAGE // 2:
                continue

            def probe(count=count, stride=stride):
                rig.touch_fn((-(-count // 32),), (32,), (rig.base, np.uint64(stride // 16), np.uint64(count), rig.sink))

            for condition in CONDITIONS:
                def prepare(condition=condition, probe=probe):
                    rig.prepare(condition)
                    if condition == "warm":
                        probe()  # after the marker: the timed launch finds its line and page just used

                busy = []
                for e in profiled_events(probe, prepare, REPS):
                    name = e.name.split("(")[0].strip()
                    if name == "write_cg":
                        busy.append(None)
                    elif name == "touch_stride" and busy:
                        busy[-1] = e.time_range.elapsed_us()  # the last one after the marker: the probe
                busy = [b for b in busy if b is not None]
                rows.append({"test": "probe", "spread": spread, "count": count, "condition": condition,
                             "busy_us": busy, "median": statistics.median(busy)})
                print(f"probe {spread:8} x{count:<4} {condition:12} {statistics.median(busy):7.2f} us", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m flashsim.experiments.first_touch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="experiments/results/h200/first-touch.json")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from .calibrate_gpu import argv_tail, provenance, read_gpu, require_gpu

    cp = require_gpu("first_touch")
    gpu = read_gpu(cp)
    rig = Rig(cp, gpu)
    rng = np.random.default_rng(args.seed)
    rows = chase_rows(rig, rng) + probe_rows(rig)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"provenance": provenance(cp, gpu, ["first_touch", *argv_tail()]),
                               "page_bytes": PAGE, "buffer_bytes": BUFFER, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
