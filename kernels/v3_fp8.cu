// FlashAttention-3 forward with e4m3 inputs (sm_90a only): the v3.cu pipeline with T = E4m3.
//
// Inputs, prepared by the pre-pass (fp8_prepass.cuh; kernels/hopper_fp8.py holds its torch reference):
//   Q, K      (B, H, N, d) / (B, Hkv, N, d) e4m3, optionally after incoherent processing (x -> x diag(+-1) H
//             / sqrt(d) along d for both, which leaves Q K^T unchanged), each block_m x d block of Q and
//             block_n x d block of K divided by its scale delta = max|x| / 448.
//   V^T       (B, Hkv, d, N_pad) e4m3: the fp8 wgmma reads both operands K-major, so V is transposed by the
//             quantisation pre-pass (no in-kernel transpose). Inside each group of 16 keys the columns are
//             permuted (0 1 8 9 2 3 10 11 4 5 12 13 6 7 14 15) so that the fp32 P accumulator converts to the
//             e4m3 A fragment without shuffles: a thread's accumulator holds keys 2t, 2t+1, 2t+8, 2t+9 and
//             the A fragment wants k = 4t..4t+3 of 16; the permutation makes those the same keys.
//   scales    fp32 (B, H, ceil(N / block_m)) for Q, (B, Hkv, ceil(N / block_n)) for K and V.
//
// Pipeline: as in v3.cu (producer warpgroup: TMA of K_j and V^T_j into the two-stage ring on k_full/v_full,
// released by consumers on k_empty/v_empty; consumers: ping-pong + intra-warpgroup overlap), with:
//   S_j = (Qq Kq_j^T) * dq * dk_j, folded into the softmax's log2 scale of block j;
//   P_j converted to e4m3 (values in [0, 1]); O kept in units of the current block's V scale: before
//   O += P_j Vq_j the accumulator is multiplied by alpha_j * dv_prev / dv_j, and the epilogue multiplies by
//   dv_last / l. Accumulation in fp32 throughout; output bf16.
// Shared memory: Q and K rows hold d bytes (128-byte swizzle, 64-byte for d64); V^T rows hold block_n keys,
// stored as panels of 128, 64 or 32 keys (the widest that divides block_n) in the matching swizzle mode,
// so FA3's fp8 tiles (d128 128 x 224, d64 192 x 160) need no padding.

// The entry points (V3_ENTRY lines, T = E4m3) are the v3-fp8 rows of v3_tiles.tsv, written by the build.
// The same cubin holds the fused pre-pass that produces these inputs from 16-bit Q, K, V (fp8_prepass.cuh).
#include "v3.cu"
#include "fp8_prepass.cuh"
