"""Block-scaled FP8 (E4M3fn) weights, DeepSeek-V3/R1 layout.

A weight ``w`` of shape ``[..., N, K]`` (``nn.Linear`` layout) is cut into ``block = (bn, bk)`` tiles
(128x128 by default; the last tile along each dim may be partial, as in DeepSeek's checkpoints). Each tile
stores one fp32 scale ``s`` (DeepSeek's ``weight_scale_inv``) and E4M3 codes ``q`` with ``w ≈ q · s``:

* ``s = amax(|tile|) / 448`` computed in fp32 and rounded *up* to the next fp32 when the division rounded
  down (at most 1 ulp above DeepSeek's value), so ``|w| / s <= 448`` holds exactly and no element saturates
  even when ``s`` is an fp32 subnormal; an all-zero tile gets ``s = 1``.
* ``q = e4m3(fp32(w) / s)``, the division in fp32, rounded to nearest-even and saturating at ±448.

Inputs are converted to fp32 first; NaN/Inf (also fp64 values beyond fp32 range) raise ConfigError.

:func:`fp8_block_matmul` is weight-only: activations stay in their dtype (bf16/fp32) and the product is
``x @ (q·s)^T`` accumulated in fp32 — the Triton kernel applies ``s`` to each 128-wide partial product, the
PyTorch path dequantizes the weight to fp32 first; both round only in accumulation order. DeepSeek's W8A8
recipe (activations quantized per token per 128 channels) is not used here.
"""

from __future__ import annotations

import math

import torch

from jalapeno.errors import ConfigError
from jalapeno.quant._dispatch import Backend, check_activations, use_triton
from jalapeno.quant.numerics import E4M3_MAX, check_finite, encode_e4m3

DEFAULT_BLOCK: tuple[int, int] = (128, 128)


def _check_block(block: tuple[int, int]) -> tuple[int, int]:
    try:
        bn, bk = (int(b) for b in block)
    except (TypeError, ValueError):
        raise ConfigError(f"fp8 block must be a pair of ints (rows, cols), got {block!r}") from None
    if bn <= 0 or bk <= 0:
        raise ConfigError(f"fp8 block sizes must be positive, got {block!r}")
    return bn, bk


def fp8_scale_shape(shape: tuple[int, ...], block: tuple[int, int] = DEFAULT_BLOCK) -> tuple[int, ...]:
    """Shape of ``weight_scale_inv`` for a weight of ``shape`` (partial edge blocks count)."""
    bn, bk = _check_block(block)
    *lead, n, k = shape
    return (*lead, math.ceil(n / bn), math.ceil(k / bk))


def _round_up_scale(amax: torch.Tensor) -> torch.Tensor:
    """fp32 ``amax / 448`` rounded up to an fp32 ``s`` with ``448 · s >= amax`` (exact test in fp64)."""
    s = amax / E4M3_MAX  # fp32, round-to-nearest
    low = s.to(torch.float64) * E4M3_MAX < amax.to(torch.float64)  # exact: 24+3 significant bits
    s = torch.where(low, torch.nextafter(s, torch.full_like(s, math.inf)), s)
    return torch.where(amax == 0, torch.ones_like(s), s)


def quantize_fp8_block(
    w: torch.Tensor, block: tuple[int, int] = DEFAULT_BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``w [..., N, K]`` to ``(q float8_e4m3fn [..., N, K], scales fp32 [..., ceil(N/bn), ceil(K/bk)])``."""
    bn, bk = _check_block(block)
    if w.ndim < 2:
        raise ConfigError(f"quantize_fp8_block: expected a weight with >= 2 dims [..., N, K], got {tuple(w.shape)}")
    check_finite(w, "quantize_fp8_block")
    w32 = w.to(torch.float32)
    check_finite(w32, "quantize_fp8_block (after conversion to fp32)")
    *lead, n, k = w32.shape
    nb, kb = math.ceil(n / bn), math.ceil(k / bk)
    padded = torch.nn.functional.pad(w32, (0, kb * bk - k, 0, nb * bn - n))
    tiles = padded.reshape(*lead, nb, bn, kb, bk)
    amax = tiles.abs().amax(dim=(-3, -1))  # [..., nb, kb]
    scales = _round_up_scale(amax)
    q = encode_e4m3(tiles / scales[..., :, None, :, None])
    q = q.reshape(*lead, nb * bn, kb * bk)[..., :n, :k].contiguous()
    return q, scales.contiguous()


def quantize_fp8_with_scales(
    w: torch.Tensor, scales: torch.Tensor, block: tuple[int, int] = DEFAULT_BLOCK
) -> torch.Tensor:
    """E4M3 codes of ``w / s`` for given per-block scales (saturating at ±448): requantize onto a fixed grid."""
    check_finite(w, "quantize_fp8_with_scales")
    s = _expand_scales(scales, w.shape, block)
    return encode_e4m3(w.to(torch.float32) / s)


def _expand_scales(scales: torch.Tensor, shape: torch.Size | tuple[int, ...], block: tuple[int, int]) -> torch.Tensor:
    bn, bk = _check_block(block)
    want = fp8_scale_shape(tuple(shape), (bn, bk))
    if tuple(scales.shape) != want:
        raise ConfigError(
            f"fp8 scales of shape {tuple(scales.shape)} do not fit a weight of shape {tuple(shape)} with "
            f"block {(bn, bk)}: expected {want}"
        )
    n, k = shape[-2], shape[-1]
    s = scales.to(torch.float32).repeat_interleave(bn, dim=-2).repeat_interleave(bk, dim=-1)
    return s[..., :n, :k]


def dequantize_fp8_block(
    q: torch.Tensor,
    scales: torch.Tensor,
    block: tuple[int, int] = DEFAULT_BLOCK,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``q · s`` per block, computed in fp32 and returned in ``dtype``."""
    _check_q(q, "dequantize_fp8_block")
    bn, bk = _check_block(block)
    want = fp8_scale_shape(tuple(q.shape), (bn, bk))
    if tuple(scales.shape) != want:
        _expand_scales(scales, q.shape, (bn, bk))  # raises the shape error
    n, k = q.shape[-2], q.shape[-1]
    w = e4m3_to_fp32(q)
    # expand scales over rows only and broadcast them over each block's columns (no weight-sized scale tensor)
    s_rows = scales.to(torch.float32).repeat_interleave(bn, dim=-2)[..., :n, :]  # [..., N, kb]
    full = k // bk
    if full:
        w[..., : full * bk].unflatten(-1, (full, bk)).mul_(s_rows[..., :full, None])
    if k % bk:
        w[..., full * bk :].mul_(s_rows[..., full:])
    return w.to(dtype)


#: fp32 value of each E4M3 byte (NaN for 0x7F/0xFF), from torch's own conversion
_E4M3_VALUES = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float32)


def e4m3_to_fp32(q: torch.Tensor) -> torch.Tensor:
    """E4M3 codes -> fp32 (exact) through a 256-entry table: a gather is ~2.5x faster on CPU than the
    element-wise ``q.to(torch.float32)``, which has no vectorised kernel there."""
    if q.is_cuda:
        return q.to(torch.float32)
    lut = _E4M3_VALUES.to(q.device)
    return lut.index_select(0, q.view(torch.uint8).reshape(-1).to(torch.int32)).reshape(q.shape)


def _check_q(q: torch.Tensor, what: str) -> None:
    if q.dtype != torch.float8_e4m3fn:
        raise ConfigError(f"{what}: weight codes must be torch.float8_e4m3fn, got {q.dtype}")
    if q.ndim < 2:
        raise ConfigError(f"{what}: expected weight codes with >= 2 dims [..., N, K], got {tuple(q.shape)}")


def fp8_block_matmul(
    x: torch.Tensor,
    q: torch.Tensor,
    scales: torch.Tensor,
    block: tuple[int, int] = DEFAULT_BLOCK,
    *,
    bias: torch.Tensor | None = None,
    backend: Backend = "auto",
) -> torch.Tensor:
    """``y = x @ (q·s)^T (+ bias)`` for ``x [..., K]`` and FP8 weight ``q [N, K]``; returns ``[..., N]`` in x's dtype.

    ``backend``: ``auto`` (Triton on CUDA with compute capability >= 8.9, PyTorch otherwise), ``torch`` or
    ``triton`` (on CPU only under ``TRITON_INTERPRET=1``).
    """
    _check_q(q, "fp8_block_matmul")
    if q.ndim != 2:
        raise ConfigError(f"fp8_block_matmul: expected a 2-D weight [N, K], got {tuple(q.shape)}")
    n, k = q.shape
    check_activations(x, k, "fp8_block_matmul")
    bn, bk = _check_block(block)
    if tuple(scales.shape) != fp8_scale_shape((n, k), (bn, bk)):
        _expand_scales(scales, q.shape, (bn, bk))  # raises the shape error
    if use_triton(x, backend, needs_fp8=True):
        from jalapeno.kernels.fp8_matmul import fp8_block_matmul_triton

        x2 = x.reshape(-1, k)
        y = fp8_block_matmul_triton(x2, q, scales, (bn, bk), bias=bias)
        return y.reshape(*x.shape[:-1], n)
    w = dequantize_fp8_block(q, scales, (bn, bk), torch.float32)
    y = x.to(torch.float32) @ w.T
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(x.dtype)
