"""The CPU decode tables (a gather instead of element-wise conversion) give exactly torch's / the spec's values
for every code."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from jalapeno.quant.fp8 import e4m3_to_fp32  # noqa: E402
from jalapeno.quant.mxfp4 import dequantize_mxfp4  # noqa: E402
from jalapeno.quant.numerics import E2M1_VALUES  # noqa: E402


def test_e4m3_table_matches_torch_conversion_for_every_byte() -> None:
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).reshape(16, 16)
    got, want = e4m3_to_fp32(codes), codes.to(torch.float32)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and int(torch.isnan(got).sum()) == 2  # 0x7F, 0xFF
    assert torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0))


def test_mxfp4_byte_table_decodes_low_then_high_nibble_for_every_byte() -> None:
    packed = torch.arange(256, dtype=torch.uint8).reshape(16, 16)  # 16 rows of K = 32
    scales = torch.full((16, 1), 127, dtype=torch.uint8)  # 2**0
    got = dequantize_mxfp4(packed, scales, torch.float64)
    for b in range(256):  # independent decode: the OCP E2M1 value list indexed by each nibble
        row, col = divmod(b, 16)
        assert got[row, 2 * col].item() == E2M1_VALUES[b & 0xF]
        assert got[row, 2 * col + 1].item() == E2M1_VALUES[b >> 4]
