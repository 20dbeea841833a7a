import sys

import torch
from flashsim import kernels

for spec in sys.argv[1:]:
    b, h, n, d = map(int, spec.split(","))
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    kernels.attention(q, k, v, algo="v3-fp8")
    torch.cuda.synchronize()
