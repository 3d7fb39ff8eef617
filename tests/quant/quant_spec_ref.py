"""Independent float64 NumPy encoders/decoders written from the format specs (no jalapeno code).

* FP8 E4M3 "fn" (OCP 8-bit FP spec): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111
  is NaN, so the largest finite value is 448. Subnormals: m/8 · 2^-6.
* FP4 E2M1 (OCP MX v1.0 §5.3.3): 1 sign, 2 exponent (bias 1), 1 mantissa bit: 0, .5, 1, 1.5, 2, 3, 4, 6.
* E8M0 (OCP MX v1.0 §5.4.1): unsigned exponent, bias 127, 0xFF = NaN.
* MX scale rule (OCP MX v1.0 §6.3): X = 2^(floor(log2(max|V|)) - emax_elem), emax_elem = 2 for E2M1.
* Jalapeño FP8 block scale (docs/quantization.md): s = fp32(amax)/448 in fp32, bumped to the next fp32 if it
  rounded down; zero block s = 1; q = RNE_e4m3(fp32(w) / s) saturating at 448.

Round to nearest with ties to the even code everywhere; saturate to the largest finite magnitude.
"""

from __future__ import annotations

import numpy as np

E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def e4m3_decode(code: int) -> float:
    s = -1.0 if code & 0x80 else 1.0
    e = (code >> 3) & 0xF
    m = code & 0x7
    if e == 0xF and m == 0x7:
        return float("nan")
    if e == 0:
        return s * (m / 8.0) * 2.0**-6
    return s * (1.0 + m / 8.0) * 2.0 ** (e - 7)


E4M3_POS = np.array([e4m3_decode(c) for c in range(0x7F)])  # codes 0x00..0x7E, increasing, max 448


def _rne_to_grid(y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Index into an increasing non-negative ``grid`` nearest to |y|, ties to the even index, saturating."""
    a = np.minimum(np.abs(np.asarray(y, dtype=np.float64)), grid[-1])
    hi = np.clip(np.searchsorted(grid, a, side="left"), 0, len(grid) - 1)
    lo = np.clip(hi - 1, 0, len(grid) - 1)
    d_lo = a - grid[lo]
    d_hi = grid[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    return np.where(pick_hi, hi, lo)


def e4m3_encode(y: np.ndarray) -> np.ndarray:
    idx = _rne_to_grid(y, E4M3_POS).astype(np.uint8)
    return idx | (np.signbit(y).astype(np.uint8) << 7)


def e2m1_decode(code: int) -> float:
    s = -1.0 if code & 0x8 else 1.0
    e = (code >> 1) & 0x3
    m = code & 0x1
    if e == 0:
        return s * m * 0.5
    return s * (1.0 + m / 2.0) * 2.0 ** (e - 1)


def e2m1_encode(y: np.ndarray) -> np.ndarray:
    idx = _rne_to_grid(y, E2M1_GRID).astype(np.uint8)
    return idx | (np.signbit(y).astype(np.uint8) << 3)


def e8m0_decode(b: int) -> float:
    return float("nan") if b == 255 else 2.0 ** (b - 127)


def floor_log2(a: np.ndarray) -> np.ndarray:
    """Exact floor(log2(a)) for positive finite floats (frexp: a = m·2^e, m in [0.5, 1))."""
    _, e = np.frexp(a)
    return e - 1


def mx_shared_exponent(amax: np.ndarray) -> np.ndarray:
    amax = np.asarray(amax, dtype=np.float64)
    safe = np.where(amax > 0, amax, 1.0)
    e = np.clip(floor_log2(safe) - 2, -127, 127)
    return np.where(amax > 0, e, -127).astype(np.int64)


def quantize_mxfp4(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``w [..., K]`` (K % 32 == 0) -> (packed uint8 [..., K/2], scales uint8 [..., K/32])."""
    w = np.asarray(w, dtype=np.float32).astype(np.float64)
    blocks = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    e = mx_shared_exponent(np.abs(blocks).max(axis=-1))
    codes = e2m1_encode(blocks / np.exp2(e.astype(np.float64))[..., None]).reshape(w.shape)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return packed, (e + 127).astype(np.uint8)


def dequantize_mxfp4(packed: np.ndarray, scales: np.ndarray) -> np.ndarray:
    lut = np.array([e2m1_decode(c) for c in range(16)])
    codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    vals = lut[codes].reshape(*scales.shape, 32)
    sc = np.vectorize(e8m0_decode, otypes=[np.float64])(scales)
    return (vals * sc[..., None]).reshape(*packed.shape[:-1], -1)


def fp8_block_scale(amax32: np.ndarray) -> np.ndarray:
    amax32 = np.asarray(amax32, dtype=np.float32)
    s = amax32 / np.float32(448.0)
    low = s.astype(np.float64) * 448.0 < amax32.astype(np.float64)
    s = np.where(low, np.nextafter(s, np.float32(np.inf)), s).astype(np.float32)
    return np.where(amax32 == 0, np.float32(1.0), s).astype(np.float32)


def quantize_fp8_block(w: np.ndarray, block: tuple[int, int] = (128, 128)) -> tuple[np.ndarray, np.ndarray]:
    """``w [..., N, K]`` -> (E4M3 codes uint8 [..., N, K], fp32 scales [..., ceil(N/bn), ceil(K/bk)])."""
    w32 = np.asarray(w, dtype=np.float32)
    *lead, n, k = w32.shape
    bn, bk = block
    nb, kb = -(-n // bn), -(-k // bk)
    pad = [(0, 0)] * len(lead) + [(0, nb * bn - n), (0, kb * bk - k)]
    tiles = np.pad(w32, pad).reshape(*lead, nb, bn, kb, bk)
    scales = fp8_block_scale(np.abs(tiles).max(axis=(-3, -1)))
    y = (tiles / scales[..., :, None, :, None]).astype(np.float32)  # fp32 division, as specified
    codes = e4m3_encode(y.astype(np.float64)).reshape(*lead, nb * bn, kb * bk)[..., :n, :k]
    return codes, scales


def dequantize_fp8_block(codes: np.ndarray, scales: np.ndarray, block: tuple[int, int] = (128, 128)) -> np.ndarray:
    lut = np.array([e4m3_decode(c) for c in range(256)])
    n, k = codes.shape[-2:]
    s = np.repeat(np.repeat(scales.astype(np.float64), block[0], axis=-2), block[1], axis=-1)[..., :n, :k]
    return lut[codes] * s
