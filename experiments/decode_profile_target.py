"""One decode call to profile: our decode kernel on a development shape, three times (ncu skips the first).

    python3 -m flashsim.experiments.decode_profile_target BATCH GROUP SEQLEN_K HEADDIM SPLITS

bf16, 32 query heads, one query per sequence, a dense cache (the decode benchmark's shapes).
"""

from __future__ import annotations

import sys

HEADS = 32  # bench_decode.HEADS


def main(argv: list[str]) -> int:
    import torch
    from flashsim import kernels

    batch, group, nk, d, splits = (int(a) for a in argv[:5])
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, HEADS, 1, d, device="cuda", dtype=torch.bfloat16, generator=g)
    shape = (batch, HEADS // group, nk, d)
    k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    for _ in range(3):
        kernels.decode(q, k, v, splits=splits)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
