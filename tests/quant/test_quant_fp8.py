"""Block-scaled FP8 (E4M3fn, 128x128 fp32 scales) against the float64 NumPy spec encoder in quant_spec_ref."""

from __future__ import annotations

import numpy as np
import pytest
import quant_spec_ref as ref
import torch

from jalapeno.errors import ConfigError
from jalapeno.quant import dequantize_fp8_block, fp8_block_matmul, quantize_fp8_block
from jalapeno.quant.fp8 import quantize_fp8_with_scales


def _inputs(kind: str, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    if kind == "normal":
        x = rng.standard_normal(shape)
    elif kind == "student_t":
        x = rng.standard_t(2, shape)
    elif kind == "tiny":
        x = 1e-30 * rng.standard_normal(shape)
    elif kind == "subnormal":  # fp32 subnormals (< 1.2e-38)
        x = 1e-41 * rng.standard_normal(shape)
    elif kind == "mixed":  # every block at a different magnitude
        x = rng.standard_normal(shape) * 10.0 ** rng.integers(-20, 20, shape[:-1] + (1,))
    else:
        raise AssertionError(kind)
    return torch.from_numpy(x.astype(np.float32))


KINDS = ["normal", "student_t", "tiny", "subnormal", "mixed"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("shape", "block"), [((200, 300), (128, 128)), ((2, 64, 96), (32, 64))])
def test_bit_exact_against_spec_encoder(kind: str, shape: tuple[int, ...], block: tuple[int, int]) -> None:
    w = _inputs(kind, shape)
    q, s = quantize_fp8_block(w, block)
    codes, scales = ref.quantize_fp8_block(w.numpy(), block)
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32
    np.testing.assert_array_equal(q.view(torch.uint8).numpy(), codes)
    np.testing.assert_array_equal(s.numpy().view(np.uint32), scales.view(np.uint32))


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_error_within_e4m3_bound(kind: str) -> None:
    w = _inputs(kind, (260, 140), seed=1)
    q, s = quantize_fp8_block(w)
    got = dequantize_fp8_block(q, s).double().numpy()
    x = w.double().numpy()
    # per-element scale, from the reference rule
    _, scales = ref.quantize_fp8_block(w.numpy())
    sx = np.repeat(np.repeat(scales.astype(np.float64), 128, 0), 128, 1)[:260, :140]
    # E4M3: half an ulp is <= 2^-4 relative for normals, 2^-10 (in scaled units) for subnormals; plus the fp32
    # division/product roundings (2^-24 relative each, 2^-150 absolute for an fp32-subnormal product).
    bound = (2.0**-4 + 2.0**-22) * np.abs(x) + 2.0**-10 * sx + 2.0**-149
    err = np.abs(got - x)
    assert np.all(err <= bound), float(np.max(err / bound))
    assert np.all(np.isfinite(got))
    # the scaled block max always lands exactly on 448: no block is coarser than it needs to be
    assert float(q.float().abs().max()) == 448.0


def test_values_on_the_grid_round_trip_exactly() -> None:
    rng = np.random.default_rng(2)
    finite = np.array([c for c in range(256) if (c & 0x7F) != 0x7F], dtype=np.uint8)
    codes = rng.choice(finite, size=(256, 256)).astype(np.uint8)
    codes[0::128, 0::128] = 0x7E  # each block holds +448, so amax/448 is its (power-of-two) scale
    vals = np.array([ref.e4m3_decode(c) for c in range(256)])[codes]
    scale_blocks = 2.0 ** rng.integers(-20, 20, size=(2, 2))
    w = vals * np.repeat(np.repeat(scale_blocks, 128, 0), 128, 1)
    q, s = quantize_fp8_block(torch.from_numpy(w.astype(np.float32)))
    np.testing.assert_array_equal(s.double().numpy(), scale_blocks)
    got = q.view(torch.uint8).numpy()
    same = (got == codes) | ((vals == 0) & ((got & 0x7F) == 0))  # -0 vs +0 both decode to 0
    assert same.all()
    assert torch.equal(dequantize_fp8_block(q, s).double(), torch.from_numpy(w))


def test_every_e4m3_code_decodes() -> None:
    codes = torch.arange(256, dtype=torch.uint8).reshape(16, 16)
    got = dequantize_fp8_block(codes.view(torch.float8_e4m3fn), torch.ones(1, 1), (16, 16), torch.float64)
    want = np.array([ref.e4m3_decode(c) for c in range(256)]).reshape(16, 16)
    np.testing.assert_array_equal(got.numpy(), want)  # NaN at 0x7F / 0xFF on both sides


def test_ties_round_to_even_and_saturate() -> None:
    ones = torch.ones(1, 1)
    #                 1+1/16 -> 1 (m=000)  1+3/16 -> 1.25 (m=010)  464 (between 448 and the NaN code) and beyond
    w = torch.tensor([[1.0625, 1.1875, -1.0625, 2.0**-10, 3 * 2.0**-10, 464.0, 500.0, -1e6]])
    want = [1.0, 1.25, -1.0, 0.0, 2.0**-8, 448.0, 448.0, -448.0]
    got = quantize_fp8_with_scales(w, ones, (128, 128)).float()
    assert got[0].tolist() == want


def test_zero_block_has_unit_scale_and_no_nan() -> None:
    w = torch.zeros(256, 256)
    w[128:, 128:] = torch.randn(128, 128)
    q, s = quantize_fp8_block(w)
    assert s[0, 0] == 1.0 and s[0, 1] == 1.0 and s[1, 0] == 1.0
    back = dequantize_fp8_block(q, s)
    assert torch.isfinite(back).all() and (back[:128] == 0).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_rejected(bad: float) -> None:
    w = torch.randn(4, 8)
    w[1, 2] = bad
    with pytest.raises(ConfigError, match="NaN/Inf"):
        quantize_fp8_block(w)


def test_fp64_beyond_fp32_range_rejected_and_bad_args() -> None:
    with pytest.raises(ConfigError, match="fp32"):
        quantize_fp8_block(torch.tensor([[1e39, 1.0]], dtype=torch.float64))
    with pytest.raises(ConfigError, match=">= 2 dims"):
        quantize_fp8_block(torch.randn(8))
    with pytest.raises(ConfigError, match="block"):
        quantize_fp8_block(torch.randn(8, 8), (0, 128))
    q, s = quantize_fp8_block(torch.randn(200, 300))
    with pytest.raises(ConfigError, match="expected"):
        dequantize_fp8_block(q, s[:, :2])
    with pytest.raises(ConfigError, match="in_features"):
        fp8_block_matmul(torch.randn(2, 299), q, s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 7])
def test_matmul_matches_float64_of_dequantized_weight(dtype: torch.dtype, m: int) -> None:
    torch.manual_seed(3)
    w = torch.randn(200, 300)
    b = torch.randn(200)
    q, s = quantize_fp8_block(w)
    x = torch.randn(m, 300).to(dtype)
    y = fp8_block_matmul(x, q, s, bias=b, backend="torch")
    assert y.dtype == dtype and y.shape == (m, 200)
    wd = ref.dequantize_fp8_block(q.view(torch.uint8).numpy(), s.numpy())
    x64 = x.double().numpy()
    want = x64 @ wd.T + b.double().numpy()
    mag = np.abs(x64) @ np.abs(wd).T + np.abs(b.double().numpy())
    out_ulp = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-23  # final rounding to the output dtype
    tol = 300 * 2.0**-24 * mag + out_ulp * np.abs(want)
    assert np.all(np.abs(y.double().numpy() - want) <= tol)
    # leading dims are kept
    y3 = fp8_block_matmul(x.reshape(1, m, 300), q, s, bias=b, backend="torch")
    assert torch.equal(y3[0], y)
