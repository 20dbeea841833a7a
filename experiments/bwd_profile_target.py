"""One backward call to profile: our v2 backward or SDPA's flash backward, twice (ncu skips the first).

    python3 -m flashsim.experiments.bwd_profile_target IMPL D N [CAUSAL]

IMPL: ours or sdpa-flash; bf16, the FA2 grid's batch and heads (batch 16k / N, hidden 2048).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    impl, d, n = argv[0], int(argv[1]), int(argv[2])
    causal = len(argv) > 3 and argv[3] == "1"
    b, h = max(1, 16384 // n), 2048 // d
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    if impl == "ours":
        from flashsim import kernels

        out, lse = kernels.attention(q, k, v, algo="v2", causal=causal, return_lse=True)
        for _ in range(2):
            kernels.attention_backward(q, k, v, out, lse, dout, causal=causal)
    else:
        leaves = tuple(t.detach().requires_grad_() for t in (q, k, v))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
            for _ in range(2):
                torch.autograd.grad(out, leaves, dout, retain_graph=True)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
