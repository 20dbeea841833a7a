"""One grid point's sample at every size: how the sampled time moves with the sample's SM count.

    python -m flashsim.experiments.sampling_exactness scan OUT.json "h100 v2 8 32 2048 64" ... [--sms 8 40]

Each POINT is "hw algo batch heads seqlen headdim [causal]". For every n in the --sms range whose nearest head
count g = round(n x groups / SMs) has a share within 1.5% of n's, the point runs on g heads and n SMs (the
selection of simulator/sampling.py bypassed), beside one --full run; OUT.json has each sample's difference
from it, its wave alignment (whether a wave of the sample holds whole heads) and its CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import contextmanager

from flashsim.algorithms.problem import Problem

SHARE_WITHIN = 0.015


@contextmanager
def _forced(g: int, n: int):
    """The sample selection replaced by g heads on n SMs (keeping the selection's checks of that sample)."""
    from flashsim.simulator import api, sampling

    choose = api.head_sample

    def forced(groups, sm_count, sms, blocks_per_group=0, slots=1, section=1, steps=1.0, unequal=False):
        c = choose(groups, sm_count, sms, blocks_per_group, slots, section, steps, unequal)
        whole = sampling._whole_waves(g, n, groups, blocks_per_group, slots, section)
        return sampling.HeadSample(g, n, groups, sm_count, whole, c.follows_work, c.chip_cuts_heads)

    api.head_sample = forced
    try:
        yield
    finally:
        api.head_sample = choose


def parse_point(text: str) -> tuple[str, str, Problem]:
    words = text.split()
    if len(words) not in (6, 7) or (len(words) == 7 and words[6] != "causal"):
        raise SystemExit(f"a point is 'hw algo batch heads seqlen headdim [causal]', not {text!r}")
    b, h, n, d = map(int, words[2:6])
    return words[0], words[1], Problem(b, h, n, d, causal=len(words) == 7)


def scan(hw: str, algo: str, p: Problem, sms: range) -> dict:
    from flashsim.hw_profiles import load_profile
    from flashsim.simulator import simulate

    profile = load_profile(hw)
    groups = p.batch * p.kv_heads
    t0 = time.process_time()
    full = simulate(algo, p, profile, sms=None)
    point = {
        "key": f"{hw} {algo} {p.describe()}",
        "full_cycles": full.cycles,
        "full_cpu_s": round(time.process_time() - t0, 2),
        "samples": [],
    }
    for n in sms:
        g = round(n * groups / profile.sm_count)
        if not 1 <= g < groups or abs(g * profile.sm_count / (n * groups) - 1) > SHARE_WITHIN:
            continue
        t0 = time.process_time()
        with _forced(g, n):
            r = simulate(algo, p, profile, small_whole_chip=False)
        s = r.sim["sample"]
        point["samples"].append(
            {
                "sms": n,
                "heads": g,
                "share_error": s["share_error"],
                "whole_waves": s["whole_waves"],
                "difference": r.cycles / full.cycles - 1,
                "cpu_s": round(time.process_time() - t0, 2),
            }
        )
    return point


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="sampling_exactness scan")
    ap.add_argument("out")
    ap.add_argument("points", nargs="+")
    ap.add_argument("--sms", type=int, nargs=2, default=(8, 40), metavar=("FROM", "TO"))
    args = ap.parse_args(argv)
    points = [parse_point(text) for text in args.points]
    doc = {"points": []}
    for hw, algo, p in points:
        doc["points"].append(scan(hw, algo, p, range(args.sms[0], args.sms[1] + 1)))
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        last = doc["points"][-1]
        print(last["key"], " ".join(f"{s['sms']}:{100 * s['difference']:+.1f}%" for s in last["samples"]), flush=True)
