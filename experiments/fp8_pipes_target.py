"""Launches v3-fp8 and v3 (bf16) at d128, batch 1, 16 heads, seqlen 16k, non-causal, twice each, for Nsight
Compute to compare their pipes (experiments/h200_fp8_pipes.sh)."""

import torch
from flashsim.kernels import attention


def main() -> None:
    q, k, v = (torch.randn(1, 16, 16384, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for _ in range(2):
        attention(q, k, v, algo="v3-fp8")
        attention(q, k, v, algo="v3")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
