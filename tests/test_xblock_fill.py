"""The two-blocks-per-SM fill sweep (calibrate --only xblock_fill): its kernels exist, and only SMs that hold one
loading block and one neighbour are read."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from flashsim.experiments import calibrate_ldsm as cl
from flashsim.experiments.calibrate_bench import BENCHMARKS, BLOCK_TIME, HOPPER_ONLY

SOURCE = Path(cl.__file__).resolve().parents[1] / "kernels" / "microbench" / "ldsm_form.cu"


def test_every_neighbour_kernel_is_defined_and_swept_on_every_arch():
    defined = dict(re.findall(r"^NEIGHBOUR\((\w+), (true|false)\)", SOURCE.read_text(), re.M))
    assert {k: v == "true" for k, v in defined.items()} == cl.NEIGHBOUR_KERNELS
    assert BENCHMARKS["xblock_fill"] is cl.xblock_fill and "xblock_fill" not in HOPPER_ONLY


def test_pairs_read_the_sms_with_one_loader_and_one_neighbour():
    # SM 0: loader and neighbour; SM 1: two loaders (a third block elsewhere shifted the roles); SM 2: one block
    t = np.zeros(5, dtype=BLOCK_TIME)
    t["smid"] = [0, 0, 1, 1, 2]
    t["clk1"] = [1000, 4000, 1000, 1000, 1000]
    roles = np.array([1, 0, 0, 0, 0])
    filled = np.array([3000, 0, 0, 0, 0], dtype=np.uint64)
    ksteps = 10
    pairs = cl._pairs(t, roles, filled, warps=4, ksteps=ksteps)
    # the loader (block 1) moved 4 warps x 10 k-steps x 2048 bytes in 4000 cycles; its neighbour 3000 in 1000
    assert pairs == [(4 * ksteps * 2048 / 4000, 3.0)]
