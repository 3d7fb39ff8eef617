"""MXFP4 weights (OCP Microscaling v1.0), the layout GPT-OSS ships its MoE experts in.

A weight ``w [..., N, K]`` (``nn.Linear`` layout, K the reduction dim) is cut along K into blocks of 32.
Each block stores one E8M0 scale byte ``b`` (value ``2**(b-127)``) and 32 E2M1 codes, two per byte:

* shared exponent ``e = floor(log2(max|x|)) - 2`` (2 is E2M1's emax), clamped to E8M0's ``[-127, 127]``;
  an all-zero block gets ``b = 0``;
* each element ``x / 2**e`` rounds to the nearest of ``0, .5, 1, 1.5, 2, 3, 4, 6`` (ties to even code),
  saturating at ±6; the sign bit follows the input's (small negatives become -0);
* bytes: element ``2i`` in the low nibble, ``2i+1`` in the high nibble (as transformers' gpt_oss/mxfp4
  integration unpacks ``*_blocks``).

``packed`` is ``uint8 [..., N, K/2]``; GPT-OSS checkpoints store the same bytes as ``[..., N, K/32, 16]``
(``*_blocks``) next to ``uint8 [..., N, K/32]`` (``*_scales``) — :func:`dequantize_mxfp4` and
:func:`mxfp4_matmul` accept both. K must be a multiple of 32: padding would change ``in_features``, so a
non-multiple is rejected with ConfigError (GPT-OSS's 2880 = 90·32 divides).

:func:`mxfp4_matmul` is weight-only: ``x @ W^T`` with ``W`` decoded exactly into the activation dtype, fp32
accumulation. Inputs are converted to fp32 first; NaN/Inf raise ConfigError.
"""

from __future__ import annotations

import torch

from jalapeno.errors import ConfigError
from jalapeno.quant._dispatch import Backend, check_activations, use_triton
from jalapeno.quant.numerics import (
    E2M1_EMAX,
    E8M0_BIAS,
    check_finite,
    decode_e2m1,
    decode_e8m0,
    encode_e2m1,
    pack_nibbles,
)

MX_BLOCK = 32


def _check_block(block: int) -> None:
    if block != MX_BLOCK:
        raise ConfigError(f"MXFP4 uses blocks of {MX_BLOCK} elements (OCP MX v1.0), got block={block}")


def quantize_mxfp4(w: torch.Tensor, block: int = MX_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``w [..., N, K]`` -> ``(packed uint8 [..., N, K/2], scales uint8 [..., N, K/32])``."""
    _check_block(block)
    if w.ndim < 1:
        raise ConfigError("quantize_mxfp4: expected a tensor with >= 1 dim, got a scalar")
    k = w.shape[-1]
    if k % block:
        raise ConfigError(
            f"quantize_mxfp4: the last dim (K={k}) must be a multiple of {block}; "
            "pad in_features or keep this layer in bf16"
        )
    check_finite(w, "quantize_mxfp4")
    w32 = w.to(torch.float32)
    check_finite(w32, "quantize_mxfp4 (after conversion to fp32)")
    blocks = w32.reshape(*w32.shape[:-1], k // block, block)
    amax = blocks.abs().amax(dim=-1)
    _, e = torch.frexp(amax)  # amax = m * 2**e, m in [0.5, 1) => floor(log2(amax)) = e - 1 (exact, subnormals too)
    shared = (e.to(torch.int32) - 1 - E2M1_EMAX).clamp(-E8M0_BIAS, E8M0_BIAS)
    shared = torch.where(amax == 0, torch.full_like(shared, -E8M0_BIAS), shared)
    inv = torch.exp2(-shared.to(torch.float64)).to(torch.float32)  # 2**-e, exact in fp32 for e in [-127, 127]
    codes = encode_e2m1(blocks * inv[..., None])  # multiplying by a power of two: exact for these magnitudes
    packed = pack_nibbles(codes.reshape(*w32.shape[:-1], k))
    scales = (shared + E8M0_BIAS).to(torch.uint8)
    return packed.contiguous(), scales.contiguous()


def as_flat_blocks(packed: torch.Tensor, scales: torch.Tensor, what: str) -> torch.Tensor:
    """Return ``packed`` as ``[..., N, K/2]`` (accepting GPT-OSS's ``[..., N, K/32, 16]``) after checking shapes."""
    if packed.dtype != torch.uint8 or scales.dtype != torch.uint8:
        raise ConfigError(f"{what}: packed blocks and scales must be uint8, got {packed.dtype} and {scales.dtype}")
    if packed.ndim == scales.ndim + 1 and packed.shape[-1] == MX_BLOCK // 2:
        packed = packed.flatten(-2)
    if packed.ndim != scales.ndim or packed.shape[:-1] != scales.shape[:-1] or packed.shape[-1] != scales.shape[
        -1
    ] * (MX_BLOCK // 2):
        raise ConfigError(
            f"{what}: blocks {tuple(packed.shape)} and scales {tuple(scales.shape)} do not match; expected "
            f"blocks [..., N, K/2] (or [..., N, K/32, 16]) with scales [..., N, K/32]"
        )
    return packed


def _decode_packed_e2m1(packed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bytes ``[..., K/2]`` -> values ``[..., K]``: one gather from a 256 x 2 table (byte -> low, high nibble's
    value), ~1.8x faster on CPU than unpacking the nibbles and decoding each."""
    lo = decode_e2m1(torch.arange(16, device=packed.device), dtype)
    table = torch.stack((lo.repeat(16), lo.repeat_interleave(16)), dim=-1)  # byte b = lo | hi << 4
    flat = table.index_select(0, packed.reshape(-1).to(torch.int32))
    return flat.reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def dequantize_mxfp4(packed: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Decode to ``[..., N, K]`` in ``dtype`` (computed in fp32, or fp64 if asked; b=255 gives NaN)."""
    packed = as_flat_blocks(packed, scales, "dequantize_mxfp4")
    work = torch.float64 if dtype == torch.float64 else torch.float32
    values = _decode_packed_e2m1(packed, work)
    values = values.reshape(*scales.shape, MX_BLOCK) * decode_e8m0(scales).to(work)[..., None]
    return values.flatten(-2).to(dtype)


def mxfp4_matmul(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    backend: Backend = "auto",
) -> torch.Tensor:
    """``y = x @ W^T (+ bias)`` for ``x [..., K]`` and an MXFP4 weight ``W [N, K]``; ``[..., N]`` in x's dtype.

    ``backend``: ``auto`` (Triton on CUDA, PyTorch otherwise), ``torch`` or ``triton`` (CPU: TRITON_INTERPRET=1).
    """
    packed = as_flat_blocks(packed, scales, "mxfp4_matmul")
    if packed.ndim != 2:
        raise ConfigError(f"mxfp4_matmul: expected a 2-D weight (blocks [N, K/2]), got {tuple(packed.shape)}")
    n, k = packed.shape[0], packed.shape[1] * 2
    check_activations(x, k, "mxfp4_matmul")
    if use_triton(x, backend):
        from jalapeno.kernels.mxfp4_matmul import mxfp4_matmul_triton

        y = mxfp4_matmul_triton(x.reshape(-1, k), packed, scales, bias=bias)
        return y.reshape(*x.shape[:-1], n)
    w = dequantize_mxfp4(packed, scales, torch.float32)
    y = x.to(torch.float32) @ w.T
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(x.dtype)
