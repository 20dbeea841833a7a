"""compute-sanitizer memcheck and racecheck over small runs of every kernel (a GPU and the sanitizer needed).

The checked program runs in a child process; only flashsim kernels are instrumented (kns=flashsim), so
PyTorch's own kernels neither slow the run down nor report hazards of their own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

SANITIZER = shutil.which("compute-sanitizer")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(SANITIZER is None, reason="needs compute-sanitizer"),
]

# Ragged lengths, seqlen_q != seqlen_k, GQA, causal and not, every algorithm and its default tiles (decode:
# dense and paged caches).
TARGET = """
import torch
from flashsim.kernels import attention
torch.manual_seed(0)
cases = [(1, 2, 1, 130, 77, 64), (1, 2, 2, 70, 200, 128), (1, 1, 1, 150, 150, 96)]
for algo in ("standard", "v1", "v2"):
    for b, h, hkv, nq, nk, d in cases:
        for causal in (False, True):
            q = torch.randn(b, h, nq, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, hkv, nk, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, hkv, nk, d, device="cuda", dtype=torch.bfloat16)
            attention(q, k, v, algo=algo, causal=causal)
# decode: dense and paged (page 16, shuffled pages, ragged lengths), GQA 4, 1 and 5 queries, 1 and 3 splits
from flashsim.kernels import decode
for nq in (1, 5):
    q = torch.randn(2, 8, nq, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 2, 150, 128, device="cuda", dtype=torch.bfloat16)
    lens = torch.tensor([150, 3], dtype=torch.int32, device="cuda")
    pool = torch.randn(12, 16, 2, 128, device="cuda", dtype=torch.bfloat16)
    table = torch.tensor([[11, 3, 7, 0, 9, 1, 5, 2, 8, 4], [6, 0, 0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.int32,
                         device="cuda")
    for causal in (False, True):
        for splits in (1, 3):
            decode(q, k, k, cache_seqlens=lens, causal=causal, splits=splits)
            decode(q, pool, pool, cache_seqlens=lens, block_table=table, causal=causal, splits=splits)
torch.cuda.synchronize()
print("sanitized run done")
"""


# The Hopper kernels (entry points v3_*): causal with Nq > Nk leaves whole query tiles with no key.
TARGET_V3 = """
import torch
from flashsim.kernels import attention
torch.manual_seed(0)
for algo in ("v3", "v3-fp8"):
    for nq, nk, d in [(130, 77, 64), (70, 200, 128), (333, 333, 128), (500, 129, 128), (200, 131, 96),
                      (150, 300, 192), (257, 100, 256)]:
        for causal in (False, True):
            q = torch.randn(1, 2, nq, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, 1, nk, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(1, 1, nk, d, device="cuda", dtype=torch.bfloat16)
            attention(q, k, v, algo=algo, causal=causal)
# two Q buffers, tiles from the counter: 2 x 40 heads x 4 query blocks, more tiles than SMs
from flashsim.algorithms.tiling import Tiling
from flashsim.kernels import hopper
for d, bm in [(64, 192), (128, 128)]:
    q, k, v = (torch.randn(2, 40, 500, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    hopper.attention(q, k, v, causal=True, tiling=Tiling(bm, 128, 4 * (bm // 64 + 1), 2), schedule="pingpong-q2")
torch.cuda.synchronize()
print("sanitized run done")
"""


def run_sanitizer(tool: str, filtered: bool = True, target: str = TARGET, kernels: str = "flashsim"):
    cmd = [SANITIZER, "--tool", tool, "--error-exitcode", "3"]
    if filtered:
        cmd += ["--kernel-name", f"kns={kernels}"]
    env = dict(os.environ)  # the child imports flashsim as this process does (installed or on PYTHONPATH)
    return subprocess.run([*cmd, sys.executable, "-c", target], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_sanitizer_clean(tool):
    from flashsim.kernels import attention

    q = torch.randn(1, 1, 64, 64, device="cuda", dtype=torch.bfloat16)
    for algo in ("standard", "v1", "v2", "decode"):
        attention(q[:, :, :1], q, q, algo=algo)  # build outside the sanitizer
    proc = run_sanitizer(tool)
    if "sanitized run done" not in proc.stdout and "kernel-name" in proc.stderr + proc.stdout:
        proc = run_sanitizer(tool, filtered=False)  # an older sanitizer without kernel filters
    report = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0 and "sanitized run done" in proc.stdout, report
    assert "0 errors" in report or "0 hazards" in report, report


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0), reason="needs sm_90")
def test_sanitizer_memcheck_hopper():
    """memcheck over v3 and v3-fp8 (TMA loads, wgmma, the bottom-right causal tiles that see no key)."""
    from flashsim.kernels import attention

    q = torch.randn(1, 1, 128, 128, device="cuda", dtype=torch.bfloat16)
    for algo in ("v3", "v3-fp8"):
        attention(q, q, q, algo=algo)  # load (and, without cubins, build) outside the sanitizer
    proc = run_sanitizer("memcheck", target=TARGET_V3, kernels="v3_")
    report = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0 and "sanitized run done" in proc.stdout, report
    assert "0 errors" in report, report


# The backward (v2-bwd): ragged lengths both ways, GQA, causal rows that see no key (Nq > Nk).
TARGET_BWD = """
import torch
from flashsim.kernels import attention, attention_backward
torch.manual_seed(0)
for b, h, hkv, nq, nk, d in [(1, 2, 1, 130, 77, 64), (1, 2, 2, 70, 200, 128), (1, 4, 1, 200, 129, 128)]:
    for causal in (False, True):
        q = torch.randn(b, h, nq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, hkv, nk, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, hkv, nk, d, device="cuda", dtype=torch.bfloat16)
        out, lse = attention(q, k, v, causal=causal, return_lse=True)
        attention_backward(q, k, v, out, lse, torch.randn_like(out), causal=causal)
torch.cuda.synchronize()
print("sanitized run done")
"""


@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_sanitizer_clean_backward(tool):
    from flashsim.kernels import attention, attention_backward

    for d in (64, 128):
        q = torch.randn(1, 1, 64, d, device="cuda", dtype=torch.bfloat16)
        out, lse = attention(q, q, q, return_lse=True)
        attention_backward(q, q, q, out, lse, out)  # load the cubins outside the sanitizer
    proc = run_sanitizer(tool, target=TARGET_BWD, kernels="flashsim_v2_bwd")
    report = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0 and "sanitized run done" in proc.stdout, report
    assert "0 errors" in report or "0 hazards" in report, report
