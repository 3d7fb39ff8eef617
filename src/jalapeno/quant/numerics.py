"""Element codecs shared by the quantizers: FP8 E4M3 (fn), FP4 E2M1 and the E8M0 power-of-two scale.

All encoders round to nearest, ties to even, and saturate at the format's largest finite value
(E4M3fn: ±448, E2M1: ±6). Inputs must already be finite (:func:`check_finite` raises a ConfigError).
"""

from __future__ import annotations

import torch

from jalapeno.errors import ConfigError

E4M3_MAX = 448.0
E2M1_MAX = 6.0
#: E2M1 code -> value; bit 3 is the sign, bits 2..1 the exponent (bias 1), bit 0 the mantissa.
E2M1_VALUES: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                                  -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)  # fmt: skip
#: E2M1 emax (largest exponent of the element format), used by the OCP MX shared-scale rule.
E2M1_EMAX = 2
E8M0_BIAS = 127
E8M0_NAN = 255


def check_finite(w: torch.Tensor, what: str) -> None:
    """Raise ConfigError if ``w`` holds NaN or ±Inf (a quantization scale cannot represent them)."""
    if not w.is_floating_point():
        raise ConfigError(f"{what}: expected a floating-point tensor, got dtype {w.dtype}")
    bad = ~torch.isfinite(w)
    if bool(bad.any()):
        n = int(bad.sum())
        raise ConfigError(
            f"{what}: {n} NaN/Inf value(s) in a tensor of shape {tuple(w.shape)}; "
            "block quantization needs finite weights — fix or clip the checkpoint first"
        )


def encode_e4m3(y: torch.Tensor) -> torch.Tensor:
    """fp32 values -> ``torch.float8_e4m3fn``, round-to-nearest-even, saturating at ±448 (no NaN produced)."""
    return y.to(torch.float32).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def encode_e2m1(y: torch.Tensor) -> torch.Tensor:
    """Values already divided by their scale -> 4-bit E2M1 codes (uint8 0..15), RNE ties, saturating at ±6.

    The sign bit follows the input's sign bit, so small negatives encode as -0 (code 8), like an IEEE cast.
    """
    a = y.abs()
    # Midpoints between neighbours of (0, .5, 1, 1.5, 2, 3, 4, 6). At a tie the even code (mantissa bit 0)
    # wins: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4; so ">" where the lower code is even.
    code = (
        (a > 0.25).to(torch.uint8)
        + (a >= 0.75)
        + (a > 1.25)
        + (a >= 1.75)
        + (a > 2.5)
        + (a >= 3.5)
        + (a > 5.0)
    ).to(torch.uint8)
    return code | (torch.signbit(y).to(torch.uint8) << 3)


def decode_e2m1(codes: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """4-bit E2M1 codes (any integer dtype, values 0..15) -> values in ``dtype`` (exact)."""
    lut = torch.tensor(E2M1_VALUES, dtype=dtype, device=codes.device)
    return lut[codes.to(torch.long)]


def e8m0_exponent(scales: torch.Tensor) -> torch.Tensor:
    """E8M0 bytes -> unbiased int32 exponents (255, the NaN code, maps to 128)."""
    return scales.to(torch.int32) - E8M0_BIAS


def decode_e8m0(scales: torch.Tensor) -> torch.Tensor:
    """E8M0 bytes -> fp32 scale 2**(b-127); b=0 is 2**-127 (an fp32 subnormal), b=255 is NaN per OCP MX v1.0."""
    out = torch.exp2(e8m0_exponent(scales).to(torch.float64)).to(torch.float32)  # exact powers of two
    return torch.where(scales == E8M0_NAN, torch.full_like(out, float("nan")), out)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [..., K] (K even) -> bytes [..., K/2]: element 2i in the low nibble, 2i+1 in the high one."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Bytes [..., K/2] -> uint8 codes [..., K] (inverse of :func:`pack_nibbles`)."""
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).flatten(-2)
