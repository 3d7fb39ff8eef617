"""Triton weight-only GEMM for block-scaled FP8 (E4M3fn) weights: ``y = x @ (q·s)^T``.

The kernel streams the FP8 codes (1 byte/weight) and one fp32 scale per ``(bn, bk)`` block, converts the codes
in registers to the activation dtype (exact: E4M3 values fit bf16/fp32), runs ``tl.dot`` per K tile with fp32
accumulation and multiplies each partial product by its block's scale (the K tile never crosses a scale
block). Decode shapes (M small, N a few thousand) give too few output tiles to fill an H100/H200, so the K loop
is split across programs (``SPLIT_K``) that write fp32 partials, summed afterwards in a fixed order
(deterministic, unlike atomics).

Use through :func:`jalapeno.quant.fp8_block_matmul`. Runs under ``TRITON_INTERPRET=1`` on CPU (tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from jalapeno.errors import ConfigError
from jalapeno.kernels._tiles import plan_tiles


@triton.jit
def _fp8_block_matmul_kernel(
    x_ptr, q_ptr, s_ptr, y_ptr,
    M, N, K, K_PER_SPLIT,
    stride_xm, stride_xk, stride_qn, stride_qk, stride_sn, stride_sk, stride_ys, stride_ym, stride_yn,
    SCALE_BN: tl.constexpr, SCALE_BK: tl.constexpr,
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
    s_row = s_ptr + (offs_n // SCALE_BN) * stride_sn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_begin = pid_k * K_PER_SPLIT
    k_end = tl.minimum(k_begin + K_PER_SPLIT, K)
    for k0 in range(k_begin, k_end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < k_end
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
            mask=mask_m[:, None] & mask_k[None, :], other=0.0,
        )
        q = tl.load(
            q_ptr + offs_n[:, None] * stride_qn + offs_k[None, :] * stride_qk,
            mask=mask_n[:, None] & mask_k[None, :], other=0.0,
        )
        s = tl.load(s_row + (k0 // SCALE_BK) * stride_sk, mask=mask_n, other=0.0)
        if DOT_FP32:
            part = tl.dot(x.to(tl.float32), tl.trans(q.to(tl.float32)), input_precision="ieee")
        else:
            part = tl.dot(x, tl.trans(q.to(x.dtype)))
        acc += part * s[None, :]
    y = y_ptr + pid_k * stride_ys + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y, acc, mask=mask_m[:, None] & mask_n[None, :])


def _pick_tiles(m: int, n: int, k: int, bk: int, on_gpu: bool) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, split_k, num_warps) for a ``[m, k] x [k, n]`` problem."""
    block_k = 128
    while block_k >= 16 and bk % block_k:
        block_k //= 2
    if block_k < 16:
        raise ConfigError(f"the FP8 Triton kernel needs a K block that is a multiple of 16, got {bk}")
    return plan_tiles(m, n, k, block_k, on_gpu)


def fp8_block_matmul_triton(
    x: torch.Tensor,
    q: torch.Tensor,
    scales: torch.Tensor,
    block: tuple[int, int],
    *,
    bias: torch.Tensor | None = None,
    split_k: int | None = None,
) -> torch.Tensor:
    """``x [M, K]`` (bf16/fp16/fp32) times FP8 ``q [N, K]`` with fp32 ``scales`` -> ``[M, N]`` in x's dtype."""
    m, k = x.shape
    n = q.shape[0]
    bn, bk = block
    on_gpu = x.is_cuda
    block_m, block_n, block_k, auto_split, warps = _pick_tiles(m, n, k, bk, on_gpu)
    split = auto_split if split_k is None else max(1, int(split_k))
    k_tiles = triton.cdiv(k, block_k)
    k_per_split = triton.cdiv(k_tiles, split) * block_k
    split = triton.cdiv(k, k_per_split)
    scales = scales.to(torch.float32)
    part = torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n), split)
    _fp8_block_matmul_kernel[grid](
        x, q, scales, part,
        m, n, k, k_per_split,
        x.stride(0), x.stride(1), q.stride(0), q.stride(1), scales.stride(0), scales.stride(1),
        part.stride(0), part.stride(1), part.stride(2),
        SCALE_BN=bn, SCALE_BK=bk, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        DOT_FP32=(x.dtype == torch.float32 or not on_gpu),
        num_warps=warps,
    )  # fmt: skip
    y = part[0] if split == 1 else part.sum(0)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(x.dtype)
