"""Triton weight-only GEMM for MXFP4 weights (OCP MX v1.0, GPT-OSS layout): ``y = x @ W^T``.

The weight stays packed in memory (0.5 byte per value + 1 E8M0 byte per 32 values). Each program loads a
``[BLOCK_N, BLOCK_K/2]`` tile of bytes, splits low nibbles (even k) from high nibbles (odd k), decodes E2M1
arithmetically and multiplies by ``2**(b-127)`` built from the scale byte's bits — exact in bf16/fp32 — and
runs two ``tl.dot`` products against the even and odd activation columns, accumulating in fp32. Decode shapes
split K across programs (``SPLIT_K``) with fp32 partials summed afterwards (deterministic).

Use through :func:`jalapeno.quant.mxfp4_matmul`. Runs under ``TRITON_INTERPRET=1`` on CPU (tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from jalapeno.kernels._tiles import plan_tiles


@triton.jit
def _e2m1_to_f32(c):
    """4-bit codes (int32) -> fp32 values: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0."""
    e = (c >> 1) & 3
    m = (c & 1).to(tl.float32)
    pow2 = (1 << tl.maximum(e - 1, 0)).to(tl.float32)
    mag = tl.where(e == 0, m * 0.5, (1.0 + m * 0.5) * pow2)
    return tl.where((c & 8) != 0, -mag, mag)


@triton.jit
def _e8m0_to_f32(b):
    """E8M0 bytes (int32) -> 2**(b-127) as fp32 bits; b=0 is the subnormal 2**-127, b=255 NaN."""
    bits = tl.where(b == 0, 0x00400000, b << 23)
    bits = tl.where(b == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _mxfp4_matmul_kernel(
    x_ptr, p_ptr, s_ptr, y_ptr,
    M, N, K, K_PER_SPLIT,
    stride_xm, stride_xk, stride_pn, stride_pk, stride_sn, stride_sk, stride_ys, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_FP32: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_begin = pid_k * K_PER_SPLIT
    k_end = tl.minimum(k_begin + K_PER_SPLIT, K)
    HALF: tl.constexpr = BLOCK_K // 2
    for k0 in range(k_begin, k_end, BLOCK_K):
        offs_j = k0 // 2 + tl.arange(0, HALF)  # byte index along K/2
        mask_j = offs_j * 2 < k_end
        xm = mask_m[:, None] & mask_j[None, :]
        x_row = x_ptr + offs_m[:, None] * stride_xm
        x_even = tl.load(x_row + (2 * offs_j)[None, :] * stride_xk, mask=xm, other=0.0)
        x_odd = tl.load(x_row + (2 * offs_j + 1)[None, :] * stride_xk, mask=xm, other=0.0)
        wm = mask_n[:, None] & mask_j[None, :]
        p = tl.load(p_ptr + offs_n[:, None] * stride_pn + offs_j[None, :] * stride_pk, mask=wm, other=0)
        b = tl.load(s_ptr + offs_n[:, None] * stride_sn + (offs_j // 16)[None, :] * stride_sk, mask=wm, other=127)
        p = p.to(tl.int32)
        scale = _e8m0_to_f32(b.to(tl.int32))
        w_even = _e2m1_to_f32(p & 0xF) * scale
        w_odd = _e2m1_to_f32(p >> 4) * scale
        if DOT_FP32:
            acc += tl.dot(x_even.to(tl.float32), tl.trans(w_even), input_precision="ieee")
            acc += tl.dot(x_odd.to(tl.float32), tl.trans(w_odd), input_precision="ieee")
        else:
            acc += tl.dot(x_even, tl.trans(w_even.to(x_even.dtype)))
            acc += tl.dot(x_odd, tl.trans(w_odd.to(x_odd.dtype)))
    y = y_ptr + pid_k * stride_ys + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y, acc, mask=mask_m[:, None] & mask_n[None, :])



def _pick_tiles(m: int, n: int, k: int, on_gpu: bool) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, split_k, num_warps); BLOCK_K counts elements (a multiple of 32)."""
    block_k = 128 if k % 128 == 0 else (64 if k % 64 == 0 else 32)
    return plan_tiles(m, n, k, block_k, on_gpu)


def mxfp4_matmul_triton(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    split_k: int | None = None,
) -> torch.Tensor:
    """``x [M, K]`` times MXFP4 ``packed [N, K/2]`` / ``scales [N, K/32]`` (uint8) -> ``[M, N]`` in x's dtype."""
    m, k = x.shape
    n = packed.shape[0]
    on_gpu = x.is_cuda
    block_m, block_n, block_k, auto_split, warps = _pick_tiles(m, n, k, on_gpu)
    split = auto_split if split_k is None else max(1, int(split_k))
    k_tiles = triton.cdiv(k, block_k)
    k_per_split = triton.cdiv(k_tiles, split) * block_k
    split = triton.cdiv(k, k_per_split)
    part = torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n), split)
    _mxfp4_matmul_kernel[grid](
        x, packed, scales, part,
        m, n, k, k_per_split,
        x.stride(0), x.stride(1), packed.stride(0), packed.stride(1), scales.stride(0), scales.stride(1),
        part.stride(0), part.stride(1), part.stride(2),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        DOT_FP32=(x.dtype == torch.float32 or not on_gpu),
        num_warps=warps,
    )  # fmt: skip
    y = part[0] if split == 1 else part.sum(0)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(x.dtype)
