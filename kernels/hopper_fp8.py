"""FP8 (e4m3) FlashAttention-3 forward: the quantisation pre-pass, then kernels/v3_fp8.cu.

Pre-pass: optional incoherent processing of Q and K (x -> x diag(s) H / sqrt(n), s random +-1, H the
Sylvester-Hadamard matrix of order n = d, or where d is not a power of two block-diagonal with blocks of
order n, the largest power of two dividing d; Q K^T is unchanged because diag(s) H / sqrt(n) is
orthogonal), then one scale
delta = max|x| / 448 per block_m x d block of Q and per block_n x d block of K and V ("block"), or one per
tensor ("tensor", the baseline). V is transposed to (B, Hkv, d, N_pad) with keys permuted inside groups of 16
(see the header of v3_fp8.cu) because the fp8 wgmma reads its B operand K-major only.

Two implementations: the fused CUDA kernel (kernels/fp8_prepass.cuh through fp8_prepass.py, one launch,
the default for block scales) and the torch functions below, its reference. Both compute the transform as
butterflies in a fixed order and divide by the scale as a multiply by its fp32 reciprocal, so the kernel
equals the reference bit for bit.
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


def signs(d: int, seed: int = 0):
    """The random +-1 diagonal of the incoherent processing, (d,) float64 on the CPU."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, 2, (d,), generator=gen).to(torch.float64) * 2 - 1


def rotate(x, diag):
    """x diag(diag) H along the last dimension in fp32, H as hadamard(d): butterflies (a + b, a - b) over
    column bits 0, 1, ..., log2(n) - 1 (n the order of H's blocks, d & -d), then one multiply by
    fp32(1 / sqrt(n)) (the order fp8_prepass.cuh follows)."""
    import torch

    d = x.shape[-1]
    if d < 1:
        raise FlashsimError(f"Hadamard transform needs a positive head dim, got {d}")
    n = d & -d
    y = x.float() * diag.to(x.device, torch.float32)
    h = 1
    while h < n:
        pairs = y.unflatten(-1, (d // (2 * h), 2, h))
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        y = torch.stack((a + b, a - b), -2).flatten(-3)
        h *= 2
    return y * torch.tensor(1 / math.sqrt(n), dtype=torch.float32, device=x.device)


def incoherent(q, k, seed: int = 0):
    """Q and K times diag(+-1) H along d: the product Q K^T is unchanged, outliers are spread over d."""
    diag = signs(q.shape[-1], seed)
    return rotate(q, diag), rotate(k, diag)


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
    # a tensor divisor: torch divides by a Python number as a multiply by its reciprocal
    scale = (amax / torch.full_like(amax, E4M3_MAX)).clamp_min(1e-12).contiguous()
    per_row = scale.reciprocal().repeat_interleave(block, dim=2)[:, :, :n, None]
    xq = (xf * per_row).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
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
    q,
    k,
    v,
    block_m: int,
    block_n: int,
    scaling: str = "block",
    incoherent_processing: bool = True,
    seed: int = 0,
    fused: bool | None = None,
    cluster: int | None = None,
):
    """The quantisation pass: returns (qq, kq, vt, q_scale, k_scale, v_scale). fused: the CUDA pre-pass
    (None: whenever it serves the call, fp8_prepass.serves), else the torch reference below; cluster: the
    CUDA pre-pass's thread blocks per block (None: its default, or the least that holds the block)."""
    from . import fp8_prepass

    if fused is None:
        fused = scaling == "block" and fp8_prepass.serves(q, k, v, block_m, block_n)
    if fused:
        if scaling != "block":
            raise FlashsimError("the fused fp8 pre-pass computes block scales; per-tensor scaling runs in torch")
        if cluster is None:
            d = q.shape[-1]
            fits = [c for c in fp8_prepass.CLUSTERS if fp8_prepass.chunks_per_thread(block_m, block_n, d, c)]
            cluster = fp8_prepass.CLUSTER if fp8_prepass.CLUSTER in fits else min(fits, default=fp8_prepass.CLUSTER)
        return fp8_prepass.quantize(q, k, v, block_m, block_n, incoherent_processing, seed, cluster)
    return prepare_reference(q, k, v, block_m, block_n, scaling, incoherent_processing, seed)


def prepare_reference(
    q, k, v, block_m: int, block_n: int, scaling: str = "block", incoherent_processing: bool = True, seed: int = 0
):
    """The pre-pass as torch operations (the fused kernel's reference; per-tensor scaling runs only here)."""
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
    fused: bool | None = None,
    persistent: bool | None = None,
):
    """FP8 forward from 16-bit (or fp32) q, k, v (B, H, N, d); returns bf16 (B, H, N, d). fused: as in
    prepare (None: the CUDA pre-pass wherever it serves the call); persistent: as in hopper.plan."""
    import torch

    hopper._check_inputs(q, k, v)
    d = q.shape[-1]
    bm, bn = hopper.choose_tile("v3-fp8", d, causal, tiling)
    qq, kq, vt, qs, ks, vs = prepare(q, k, v, bm, bn, scaling, incoherent_processing, seed, fused)
    if out is None:
        out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    tile = _Tile(bm, bn)
    return hopper.run(
        "v3-fp8", qq, kq, vt, causal, tile, schedule, out, (qs, ks, vs), nk=k.shape[2], persistent=persistent
    )


class _Tile:
    def __init__(self, block_m: int, block_n: int) -> None:
        self.block_m, self.block_n = block_m, block_n
