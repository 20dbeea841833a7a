"""Claim: online softmax is exact. V2's tile program, run by the numeric interpreter, equals softmax(QK^T)V
up to rounding, while normalising each K/V block on its own and summing the blocks is not attention."""

from __future__ import annotations

from .base import Outcome, figure, max_rel_error, save

NAME = "online-softmax-exact"
CLAIM = "V2's online softmax equals softmax(QK^T)V to rounding; normalising each K/V block alone does not"
# The schedule's error may be at most this multiple of a direct fp32 computation's own error (style: bound
# an error by the reference's low-precision error, not by an absolute constant).
ROUNDING_FACTOR = 10.0
NAIVE_ERROR_ABOVE = 1e-2
FP64_ROUNDING = 1e-13  # a few hundred ulps of fp64 over N-long sums


def naive_blockwise(q, k, v, block_n: int):
    """Each K/V block's scores softmax-normalised on their own, the block outputs summed (fp64)."""
    import torch

    out = torch.zeros_like(q)
    for col in range(0, k.shape[-2], block_n):
        s = q @ k[..., col:col + block_n, :].transpose(-1, -2) * q.shape[-1] ** -0.5
        out += torch.softmax(s, -1) @ v[..., col:col + block_n, :]
    return out


def online_fp64(q, k, v, block_n: int):
    """The online-softmax recurrence V2's program runs (running max m, sum l, unnormalised O), in fp64."""
    import torch

    m = torch.full((*q.shape[:-1], 1), -torch.inf, dtype=q.dtype)
    l = torch.zeros_like(m)
    acc = torch.zeros_like(q)
    for col in range(0, k.shape[-2], block_n):
        s = q @ k[..., col:col + block_n, :].transpose(-1, -2) * q.shape[-1] ** -0.5
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = (s - m_new).exp()
        corr = (m - m_new).exp()
        l = l * corr + p.sum(-1, keepdim=True)
        acc = acc * corr + p @ v[..., col:col + block_n, :]
        m = m_new
    return acc / l


def run(quick: bool) -> Outcome:
    import torch
    from flashsim.algorithms import Tiling, attention

    n, heads, d, block_n = (256, 2, 64, 64) if quick else (1024, 4, 64, 64)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, d, generator=gen, dtype=torch.float64) for _ in range(3))
    exact = torch.softmax(q @ k.transpose(-1, -2) * d**-0.5, -1) @ v
    # fp32 inputs: the problem's dtype is fp32, so no operand is rounded to 16 bits on the way
    schedule = attention(q.float(), k.float(), v.float(), algo="v2", tiling=Tiling(64, block_n, 4, 2))
    qf, kf, vf = q.float(), k.float(), v.float()
    direct_fp32 = torch.softmax(qf @ kf.transpose(-1, -2) * d**-0.5, -1) @ vf
    errors = {
        "v2_schedule_fp32": max_rel_error(schedule, exact),
        "direct_fp32": max_rel_error(direct_fp32, exact),
        "online_recurrence_fp64": max_rel_error(online_fp64(q, k, v, block_n), exact),
        "naive_blockwise_fp64": max_rel_error(naive_blockwise(q, k, v, block_n), exact),
    }
    holds = (errors["v2_schedule_fp32"] <= ROUNDING_FACTOR * errors["direct_fp32"]
             and errors["online_recurrence_fp64"] <= FP64_ROUNDING
             and errors["naive_blockwise_fp64"] > NAIVE_ERROR_ABOVE)
    verdict = (f"v2 schedule max rel. error {errors['v2_schedule_fp32']:.2e} (fp32 arithmetic; a direct fp32 "
               f"softmax(QK^T)V has {errors['direct_fp32']:.2e}); the same recurrence in fp64 "
               f"{errors['online_recurrence_fp64']:.1e}; per-block normalisation "
               f"{errors['naive_blockwise_fp64']:.2e} even in fp64")
    numbers = {"seqlen": n, "heads": heads, "headdim": d, "block_n": block_n, "kv_blocks": n // block_n,
               "max_rel_error": errors, "rounding_factor": ROUNDING_FACTOR, "naive_error_above": NAIVE_ERROR_ABOVE,
               "fp64_rounding": FP64_ROUNDING}
    return Outcome(holds, verdict, numbers)


def plot(outcome: Outcome, path: str) -> None:
    errors = outcome.numbers["max_rel_error"]
    fig, ax = figure(width=7.5)
    labels = ["v2 schedule\n(numeric interp., fp32)", "direct softmax(QK^T)V\n(fp32)",
              "online recurrence\n(fp64)", "each block normalised\nalone (fp64)"]
    ax.bar(labels, list(errors.values()), color=["tab:green", "tab:blue", "tab:olive", "tab:red"])
    ax.tick_params(axis="x", labelsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("max |O - O_exact| / max |O_exact|")
    for i, e in enumerate(errors.values()):
        ax.text(i, e, f"{e:.1e}", ha="center", va="bottom", fontsize=9)
    save(fig, path, f"Online softmax is exact ({outcome.numbers['kv_blocks']} K/V blocks, exact = fp64)")
