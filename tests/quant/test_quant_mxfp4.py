"""MXFP4 (OCP MX v1.0, GPT-OSS layout) against the float64 NumPy spec encoder in quant_spec_ref."""

from __future__ import annotations

import numpy as np
import pytest
import quant_spec_ref as ref
import torch

from jalapeno.errors import ConfigError
from jalapeno.quant import dequantize_mxfp4, mxfp4_matmul, quantize_mxfp4


def _inputs(kind: str, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    if kind == "normal":
        x = rng.standard_normal(shape)
    elif kind == "student_t":
        x = rng.standard_t(2, shape)
    elif kind == "tiny":
        x = 1e-30 * rng.standard_normal(shape)
    elif kind == "subnormal":  # fp32 subnormals: the E8M0 scale clamps at 2^-127
        x = 1e-39 * rng.standard_normal(shape)
    elif kind == "mixed":
        x = rng.standard_normal(shape) * 10.0 ** rng.integers(-30, 30, shape[:-1] + (shape[-1] // 32, 1)).repeat(
            32, -1
        ).reshape(shape)
    else:
        raise AssertionError(kind)
    return torch.from_numpy(x.astype(np.float32))


KINDS = ["normal", "student_t", "tiny", "subnormal", "mixed"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(48, 96), (3, 5, 64)])
def test_bit_exact_against_spec_encoder(kind: str, shape: tuple[int, ...]) -> None:
    w = _inputs(kind, shape)
    packed, scales = quantize_mxfp4(w)
    want_packed, want_scales = ref.quantize_mxfp4(w.numpy())
    assert packed.dtype == torch.uint8 and scales.dtype == torch.uint8
    assert packed.shape == (*shape[:-1], shape[-1] // 2) and scales.shape == (*shape[:-1], shape[-1] // 32)
    np.testing.assert_array_equal(scales.numpy(), want_scales)
    np.testing.assert_array_equal(packed.numpy(), want_packed)


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_error_within_mx_bound(kind: str) -> None:
    w = _inputs(kind, (40, 128), seed=1)
    packed, scales = quantize_mxfp4(w)
    got = dequantize_mxfp4(packed, scales, torch.float64).numpy()
    x = w.double().numpy()
    blocks = x.reshape(40, 4, 32)
    X = np.exp2(ref.mx_shared_exponent(np.abs(blocks).max(-1)).astype(np.float64))[..., None]
    y = np.abs(blocks) / X
    # half the E2M1 gap around |y| (0.25 below 2, 0.5 below 4, 1 up to 6), or the saturation error above 6
    half_gap = np.where(y <= 2, 0.25, np.where(y <= 4, 0.5, np.where(y <= 6, 1.0, y - 6.0)))
    err = np.abs(got.reshape(40, 4, 32) - blocks)
    assert np.all(err <= half_gap * X * (1 + 1e-12))
    assert np.all(y < 8)  # the shared-exponent rule keeps every element below 8 scale units


def test_every_code_and_nibble_order_decode() -> None:
    packed = torch.arange(256, dtype=torch.uint8).reshape(16, 16)  # every (low, high) nibble pair
    got = dequantize_mxfp4(packed, torch.full((16, 1), 127, dtype=torch.uint8), torch.float64).numpy()
    lut = np.array([ref.e2m1_decode(c) for c in range(16)])
    b = np.arange(256).reshape(16, 16)
    want = np.stack([lut[b & 0xF], lut[b >> 4]], -1).reshape(16, 32)  # element 2i = low nibble
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got[0, 16:18]), [True, False])  # code 8 is -0, not +0


def test_e8m0_sweep_decodes() -> None:
    scales = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(256, 1)
    packed = torch.full((256, 16), 0x21, dtype=torch.uint8)  # elements 0.5 (code 1), 1.0 (code 2)
    got = dequantize_mxfp4(packed, scales, torch.float64).numpy()
    for b in range(255):
        assert got[b, 0] == 0.5 * ref.e8m0_decode(b) and got[b, 1] == ref.e8m0_decode(b), b
    assert np.isnan(got[255]).all()  # 0xFF is NaN per spec
    f32 = dequantize_mxfp4(packed[:1], scales[:1], torch.float32)
    assert f32[0, 0].item() == 2.0**-128  # the smallest scale still decodes (fp32 subnormal), not 0


def test_ties_to_even_and_saturation_at_scale_one() -> None:
    # max 6 -> floor(log2 6) - 2 = 0 -> scale 1 (byte 127)
    vals = [6.0, 2.5, 5.0, 0.25, 0.75, 1.25, 1.75, 3.5, -2.5, -5.0, 7.9, -7.9, 0.2, -0.1, 2.9, 4.4]
    want = [6.0, 2.0, 4.0, 0.0, 1.0, 1.0, 2.0, 4.0, -2.0, -4.0, 6.0, -6.0, 0.0, -0.0, 3.0, 4.0]
    w = torch.tensor([vals + [0.0] * 16])
    packed, scales = quantize_mxfp4(w)
    assert scales.tolist() == [[127]]
    got = dequantize_mxfp4(packed, scales)[0, :16].tolist()
    assert got == want


def test_zero_block() -> None:
    w = torch.zeros(2, 64)
    w[1, 32:] = torch.randn(32)
    packed, scales = quantize_mxfp4(w)
    assert scales[0].tolist() == [0, 0] and scales[1, 0] == 0  # all-zero blocks take the smallest scale
    back = dequantize_mxfp4(packed, scales)
    assert torch.isfinite(back).all() and (back[0] == 0).all() and (back[1, :32] == 0).all()


def test_errors() -> None:
    with pytest.raises(ConfigError, match="multiple of 32"):
        quantize_mxfp4(torch.randn(4, 48))
    w = torch.randn(4, 64)
    w[0, 0] = float("nan")
    with pytest.raises(ConfigError, match="NaN/Inf"):
        quantize_mxfp4(w)
    with pytest.raises(ConfigError, match="blocks of 32"):
        quantize_mxfp4(torch.randn(4, 64), block=16)
    p, s = quantize_mxfp4(torch.randn(4, 64))
    with pytest.raises(ConfigError, match="do not match"):
        dequantize_mxfp4(p[:, :16], s)
    with pytest.raises(ConfigError, match="in_features"):
        mxfp4_matmul(torch.randn(2, 32), p, s)


def test_matches_transformers_gpt_oss_dequantizer() -> None:
    """transformers' GPT-OSS loader is an independent decoder of the checkpoint layout ([E, N, K/32, 16])."""
    mx = pytest.importorskip("transformers.integrations.mxfp4")
    w = _inputs("student_t", (3, 40, 96), seed=4)
    packed, scales = quantize_mxfp4(w)
    blocks = packed.reshape(3, 40, 3, 16)  # the *_blocks tensor as GPT-OSS stores it
    hf = mx.convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)  # [E, K, N] (transposed)
    ours = dequantize_mxfp4(blocks, scales, torch.float32)
    assert torch.equal(hf.transpose(1, 2), ours)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_matches_float64_of_dequantized_weight(dtype: torch.dtype) -> None:
    torch.manual_seed(5)
    w = torch.randn(72, 160)
    b = torch.randn(72)
    packed, scales = quantize_mxfp4(w)
    x = torch.randn(1, 4, 160).to(dtype)
    y = mxfp4_matmul(x, packed, scales, bias=b, backend="torch")
    assert y.dtype == dtype and y.shape == (1, 4, 72)
    wd = ref.dequantize_mxfp4(packed.numpy(), scales.numpy())
    x64 = x.double().numpy()
    want = x64 @ wd.T + b.double().numpy()
    mag = np.abs(x64) @ np.abs(wd).T + np.abs(b.double().numpy())
    out_ulp = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-23
    assert np.all(np.abs(y.double().numpy() - want) <= 200 * 2.0**-24 * mag + out_ulp * np.abs(want))
