"""FP8 (e4m3) FlashAttention-3 forward: the quantisation pre-pass in torch, then kernels/v3_fp8.cu.

Pre-pass: optional incoherent processing of Q and K (x -> x diag(s) H / sqrt(n), s random +-1, H the
Sylvester-Hadamard matrix of order n = d, or where d is not a power of two block-diagonal with blocks of
order n, the largest power of two dividing d; Q K^T is unchanged because diag(s) H / sqrt(n) is
orthogonal), then one scale
delta = max|x| / 448 per block_m x d block of Q and per block_n x d block of K and V ("block"), or one per
tensor ("tensor", the baseline). V is transposed to (B, Hkv, d, N_pad) with keys permuted inside groups of 16
(see the header of v3_fp8.cu) because the fp8 wgmma reads its B operand K-major only.
"""

from __future__ import annotations

import math

from flashsim.errors import FlashsimError

from . import hopper

E4M3_MAX = 448.0
# Key order inside each group of 16 in V^T: position 4t + e holds key 2t + (e & 1) + 8 (e >> 1).
KEY_PERM = [2 * (p // 4) + (p % 4 & 1) + 8 * (p % 4 >> 1) for p in range(16)]


def hadamard(d: int, device=None):
    """Sylvester-Hadamard matrix of order d, scaled to be orthogonal. A head dim that is not a power of two
    (96, 192) gets a block-diagonal one, blocks of the largest power of two dividing d (as the simulator's
    algorithms.numeric.hadamard_matrix): still orthogonal, outliers spread within each block."""
    import torch

    if d < 1:
        raise FlashsimError(f"Hadamard transform needs a positive head dim, got {d}")
    n = d & -d
    h = torch.ones(1, 1, dtype=torch.float64, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return torch.block_diag(*[h] * (d // n)) / math.sqrt(n)


def incoherent(q, k, seed: int = 0):
    """Q and K times diag(+-1) H along d: the product Q K^T is unchanged, outliers are spread over d."""
    import torch

    d = q.shape[-1]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    signs = torch.randint(0, 2, (d,), generator=gen).to(torch.float64) * 2 - 1
    m = (signs[:, None] * hadamard(d)).to(q.device, torch.float32)
    return (q.float() @ m), (k.float() @ m)


def quantize(x, block: int, scaling: str = "block"):
    """(B, H, N, d) -> (e4m3 tensor, fp32 scales (B, H, ceil(N / block))) with x ~ xq * scale per block."""
    import torch

    b, h, n, d = x.shape
    nb = math.ceil(n / block)
    xf = x.float()
    if scaling == "block":
        padded = torch.nn.functional.pad(xf, (0, 0, 0, nb * block - n))
        amax = padded.view(b, h, nb, block * d).abs().amax(-1)
    elif scaling == "tensor":
        amax = xf.abs().amax().expand(b, h, nb)
    else:
        raise FlashsimError(f"unknown fp8 scaling {scaling!r}; choose block or tensor")
    scale = (amax / E4M3_MAX).clamp_min(1e-12).contiguous()
    per_row = scale.repeat_interleave(block, dim=2)[:, :, :n, None]
    xq = (xf / per_row).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return xq.contiguous(), scale


def transpose_v(vq, block_n: int):
    """(B, Hkv, N, d) e4m3 -> (B, Hkv, d, N_pad) with keys permuted inside each group of 16."""
    import torch

    b, h, n, d = vq.shape
    npad = math.ceil(n / block_n) * block_n
    padded = torch.zeros(b, h, npad, d, dtype=torch.uint8, device=vq.device)
    padded[:, :, :n] = vq.view(torch.uint8)
    perm = torch.tensor(KEY_PERM, device=vq.device)
    idx = (torch.arange(npad // 16, device=vq.device)[:, None] * 16 + perm).reshape(-1)
    return padded[:, :, idx].transpose(2, 3).contiguous().view(torch.float8_e4m3fn)


def prepare(
    q, k, v, block_m: int, block_n: int, scaling: str = "block", incoherent_processing: bool = True, seed: int = 0
):
    """The quantisation pass: returns (qq, kq, vt, q_scale, k_scale, v_scale)."""
    if incoherent_processing:
        q, k = incoherent(q, k, seed)
    qq, qs = quantize(q, block_m, scaling)
    kq, ks = quantize(k, block_n, scaling)
    vq, vs = quantize(v, block_n, scaling)
    return qq, kq, transpose_v(vq, block_n), qs, ks, vs


def attention(
    q,
    k,
    v,
    causal: bool = False,
    scaling: str = "block",
    incoherent_processing: bool = True,
    tiling=None,
    schedule: str = "pingpong",
    seed: int = 0,
    out=None,
):
    """FP8 forward from 16-bit (or fp32) q, k, v (B, H, N, d); returns bf16 (B, H, N, d)."""
    import torch

    hopper._check_inputs(q, k, v)
    d = q.shape[-1]
    bm, bn = hopper.choose_tile("v3-fp8", d, causal, tiling)
    qq, kq, vt, qs, ks, vs = prepare(q, k, v, bm, bn, scaling, incoherent_processing, seed)
    if out is None:
        out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    return hopper.run("v3-fp8", qq, kq, vt, causal, _Tile(bm, bn), schedule, out, (qs, ks, vs), nk=k.shape[2])


class _Tile:
    def __init__(self, block_m: int, block_n: int) -> None:
        self.block_m, self.block_n = block_m, block_n
