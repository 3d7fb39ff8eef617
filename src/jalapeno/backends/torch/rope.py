"""Rotary position embeddings: default, linear, Llama-3 and YaRN frequency schedules.

``inv_freq`` (radians per position, one per rotated pair) and an ``attention_factor`` that scales cos/sin are
computed once from the model's ``rope_theta`` and :class:`~jalapeno.models.arch.RopeScaling`; per step
:func:`rope_cos_sin` turns positions into cos/sin tables that every layer shares, and :func:`apply_rope`
rotates q or k.
"""

from __future__ import annotations

import math

import torch

from jalapeno.errors import ConfigError
from jalapeno.models.arch import RopeScaling


def _need(rope: RopeScaling, name: str) -> float:
    """A parameter the rope type requires (``factor``, ``low_freq_factor``...): one clear line when missing."""
    val = getattr(rope, name)
    if val is None:
        raise ConfigError(f"rope_type {rope.rope_type!r} needs {name!r} in rope_scaling / rope_parameters")
    return float(val)


def rope_factor(rope: RopeScaling) -> float:
    return _need(rope, "factor")


def rope_frequencies(theta: float, rope: RopeScaling, dim: int) -> tuple[torch.Tensor, float]:
    """Return ``(inv_freq [dim/2] float32, attention_factor)`` for base ``theta`` and a rotary dimension ``dim``."""
    base = float(theta)
    kind = rope.rope_type
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim))
    if kind == "default":
        return inv_freq, 1.0
    if kind == "linear":
        return inv_freq / rope_factor(rope), 1.0
    if kind == "llama3":
        return _llama3(inv_freq, rope), 1.0
    if kind == "yarn":
        return _yarn(base, dim, rope)
    raise ConfigError(f"rope_type {kind!r} is not supported; use default, linear, llama3 or yarn")


def _llama3(inv_freq: torch.Tensor, rope: RopeScaling) -> torch.Tensor:
    factor = rope_factor(rope)
    low, high = _need(rope, "low_freq_factor"), _need(rope, "high_freq_factor")
    old_len = _need(rope, "original_max_position_embeddings")
    wavelen = 2 * math.pi / inv_freq
    # long wavelengths (low frequencies) are interpolated by `factor`, short ones kept, a smooth blend between
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, blended, scaled)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(base: float, dim: int, rope: RopeScaling) -> tuple[torch.Tensor, float]:
    factor = rope_factor(rope)
    orig = _need(rope, "original_max_position_embeddings")
    attn = rope.attention_factor
    if attn is None:
        ms, ms_all = rope.mscale, rope.mscale_all_dim
        attn = yarn_mscale(factor, ms) / yarn_mscale(factor, ms_all) if ms and ms_all else yarn_mscale(factor)
    beta_fast = float(rope.beta_fast or 32)
    beta_slow = float(rope.beta_slow or 1)

    def correction_dim(rotations: float) -> float:
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32, device="cpu") - lo) / (hi - lo)).clamp(0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2, device="cpu").float() / dim)
    extrapolate = 1 - ramp  # 1 for high-frequency dims: keep the original frequency
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolate) + (1.0 / pos_freqs) * extrapolate
    return inv_freq, float(attn)


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, attention_factor: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotation tables ``cos, sin [T, 1, dim]`` for integer ``positions [T]`` (computed in float32 like HF),
    laid out for :func:`apply_rope`: ``cos`` repeats the ``dim/2`` angles' cosines twice, ``sin`` holds
    ``(-sin, +sin)``. Built once per step and shared by every layer."""
    freqs = positions.float()[:, None] * inv_freq[None, :].to(positions.device)
    cos, sin = freqs.cos(), freqs.sin()
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    cos2 = torch.cat((cos, cos), dim=-1)
    sin2 = torch.cat((-sin, sin), dim=-1)
    return cos2[:, None, :].to(dtype), sin2[:, None, :].to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleave: bool = False) -> torch.Tensor:
    """Rotate ``x [T, H, dim]`` by the tables of :func:`rope_cos_sin`.

    Pairs are ``(i, i + dim/2)`` (HF ``rotate_half``), or ``(2i, 2i+1)`` when ``interleave`` (DeepSeek); the
    interleaved result is returned de-interleaved (first halves, then second halves) exactly as HF does, which
    leaves q.k unchanged because q and k get the same layout. With ``x = (x1, x2)`` the result is
    ``(x1 cos - x2 sin, x2 cos + x1 sin)`` = ``x * cos + (x2, x1) * (-sin, sin)``: three ops, the last two
    in place on the halves of ``x * cos`` (no swapped copy of ``x``).
    """
    half = x.shape[-1] // 2
    if interleave:
        x = x.unflatten(-1, (half, 2)).transpose(-1, -2).flatten(-2)
    out = x * cos
    out[..., :half].addcmul_(x[..., half:], sin[..., :half])
    out[..., half:].addcmul_(x[..., :half], sin[..., half:])
    return out
