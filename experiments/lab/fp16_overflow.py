"""Claim: exp of raw attention logits overflows fp16 (largest finite 65504 = e^11.09), so softmax needs the
max subtracted first. Rows whose scaled logits reach ~20 give inf and then NaN without it; the online
softmax's running max keeps every exponent <= 0, and V2's schedule on fp16 inputs stays finite."""

from __future__ import annotations

import math

from .base import Outcome, figure, max_rel_error, save

NAME = "fp16-overflow"
CLAIM = "exp(S) overflows fp16 for logits above ln(65504) = 11.09; subtracting the running max never does"
FP16_MAX = 65504.0
SAFE_ERROR_BELOW = 1e-2  # fp16 probabilities: ~3 significant digits


def logits(rows: int, cols: int, seed: int):
    """Scaled scores S (fp64): N(0, 1) rows, every fourth row with a peak ramping from 4 to 20, as a sharply
    attending head produces."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    peaks = torch.linspace(4.0, 20.0, rows // 4, dtype=torch.float64)
    s[::4, 0] = peaks
    s[::4, 1:8] += peaks[:, None] - 3.0
    return s


def unsafe_fp16(s):
    """softmax(S) in fp16 without the max: exp(S) / rowsum(exp(S))."""
    e = s.half().exp()
    return e / e.sum(-1, keepdim=True)


def running_max_fp16(s, block_n: int):
    """The online softmax in fp16 arithmetic: a running max m, sum l and the rescaled probabilities."""
    import torch

    s = s.half()
    m = torch.full((s.shape[0], 1), -math.inf, dtype=torch.float16)
    l = torch.zeros((s.shape[0], 1), dtype=torch.float16)
    for col in range(0, s.shape[1], block_n):
        m_new = torch.maximum(m, s[:, col:col + block_n].amax(-1, keepdim=True))
        l = l * (m - m_new).exp() + (s[:, col:col + block_n] - m_new).exp().sum(-1, keepdim=True)
        m = m_new
    return (s - m).exp() / l


def schedule_output(seed: int, quick: bool):
    """V2's schedule on fp16 Q, K, V whose scores reach ~20 after scaling: (output, fp64 reference)."""
    import torch
    from flashsim.algorithms import Tiling, attention

    n, d = (128, 64) if quick else (512, 64)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, n, d, generator=gen, dtype=torch.float64)
    k = q.clone() * 0.5 + 0.5 * torch.randn(1, 1, n, d, generator=gen, dtype=torch.float64)
    v = torch.randn(1, 1, n, d, generator=gen, dtype=torch.float64)
    q = q * 20.0 / (q @ k.transpose(-1, -2) * d**-0.5).amax()  # the largest scaled score is 20
    q16, k16, v16 = q.half(), k.half(), v.half()
    out = attention(q16, k16, v16, algo="v2", tiling=Tiling(64, 64, 4, 2))
    qd, kd, vd = q16.double(), k16.double(), v16.double()
    ref = torch.softmax(qd @ kd.transpose(-1, -2) * d**-0.5, -1) @ vd
    return out, ref, float((qd @ kd.transpose(-1, -2) * d**-0.5).amax())


def run(quick: bool) -> Outcome:
    import torch

    rows, cols, block_n = (64, 256, 64) if quick else (256, 1024, 64)
    s = logits(rows, cols, seed=0)
    exact = torch.softmax(s, -1)
    unsafe, safe = unsafe_fp16(s), running_max_fp16(s, block_n)
    row_max = s.amax(-1)
    bad_unsafe = ~torch.isfinite(unsafe).all(-1)
    bad_safe = ~torch.isfinite(safe).all(-1)
    overflowing = row_max.half().float() > math.log(FP16_MAX)
    safe_err = ((safe.double() - exact).abs().amax(-1) / exact.amax(-1)).tolist()
    out, ref, top = schedule_output(1, quick)
    sched_err = max_rel_error(out, ref) if torch.isfinite(out).all() else math.inf
    holds = (bool(bad_unsafe.any()) and bool((bad_unsafe == overflowing).all()) and not bad_safe.any()
             and max(safe_err) < SAFE_ERROR_BELOW and sched_err < SAFE_ERROR_BELOW)
    which = "exactly" if bool((bad_unsafe == overflowing).all()) else "not exactly"
    verdict = (f"without the max {int(bad_unsafe.sum())} of {rows} rows are inf/NaN ({which} the rows with a "
               f"logit > {math.log(FP16_MAX):.2f}); with the running max 0 rows, max rel. error "
               f"{max(safe_err):.1e}; v2 schedule on fp16 inputs with logits up to {top:.1f}: error {sched_err:.1e}")
    numbers = {
        "rows": rows, "cols": cols, "block_n": block_n, "overflow_logit": math.log(FP16_MAX),
        "row_max_logit": row_max.tolist(), "nonfinite_rows_without_max": int(bad_unsafe.sum()),
        "nonfinite_rows_predicted": int(overflowing.sum()), "nonfinite_rows_running_max": int(bad_safe.sum()),
        "running_max_row_error": safe_err, "v2_schedule_fp16_max_logit": top,
        "v2_schedule_fp16_rel_error": sched_err, "safe_error_below": SAFE_ERROR_BELOW,
    }
    return Outcome(holds, verdict, numbers)


def plot(outcome: Outcome, path: str) -> None:
    nb = outcome.numbers
    fig, ax = figure(width=6.5)
    x, err = nb["row_max_logit"], nb["running_max_row_error"]
    threshold = nb["overflow_logit"]
    ok = [(a, b) for a, b in zip(x, err, strict=True) if a <= threshold]
    over = [(a, b) for a, b in zip(x, err, strict=True) if a > threshold]
    ax.scatter(*zip(*ok, strict=True), s=12, color="tab:green", label="running max: finite (no max: finite too)")
    ax.scatter(*zip(*over, strict=True), s=18, color="tab:red", marker="x",
               label="running max: finite (no max: inf / NaN)")
    ax.axvline(threshold, color="grey", linestyle="--", linewidth=1, label="ln(65504) = 11.09")
    ax.set_yscale("log")
    ax.set_xlabel("largest scaled logit of the row")
    ax.set_ylabel("fp16 softmax row error (running max)")
    ax.legend(fontsize=8)
    save(fig, path, f"fp16 softmax: {nb['nonfinite_rows_without_max']} of {nb['rows']} rows overflow without the max")
