"""The block-start microbenchmark's harness (experiments/block_start.py, kernels/microbench/block_start.cu):
its constant-bank chain and its refusal without a GPU; the measurements run on a GPU only."""

from pathlib import Path

import pytest
from flashsim.experiments import block_start as bs


def test_the_chain_visits_one_new_line_a_step_and_returns():
    nxt = bs.chain()
    seen, i = [], 0
    for _ in range(bs.STEPS):
        seen.append(i)
        i = int(nxt[i])
    assert i == 0 and len(set(seen)) == bs.STEPS
    assert {s // bs.LINE_WORDS for s in seen} == set(range(bs.STEPS))  # a 64-byte line each


def test_every_kernel_of_the_source_is_measured():
    source = (Path(bs.__file__).resolve().parents[1] / "kernels" / "microbench" / "block_start.cu").read_text()
    kernels = {k for k, _ in bs.points()}
    assert all(f'extern "C" __global__ void {k}(' in source or f"__launch_bounds__(384, 1) {k}(" in source
               for k in kernels)


def test_without_a_gpu_it_says_so_in_one_line(capsys):
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:
        pass
    assert bs.main(["--out", "/nonexistent/x.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("block_start:")
