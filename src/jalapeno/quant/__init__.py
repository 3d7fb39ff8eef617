"""Block-scaled weight formats: FP8 E4M3 with 128x128 fp32 scales (DeepSeek) and MXFP4 (OCP MX, GPT-OSS).

``jalapeno.quant.formats`` is pure data (no torch). Everything else needs torch and is imported lazily on
first attribute access, so ``import jalapeno.quant.formats`` stays cheap for the cost model.
See docs/quantization.md.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    "quantize_fp8_block": "fp8",
    "dequantize_fp8_block": "fp8",
    "quantize_fp8_with_scales": "fp8",
    "fp8_block_matmul": "fp8",
    "fp8_scale_shape": "fp8",
    "quantize_mxfp4": "mxfp4",
    "dequantize_mxfp4": "mxfp4",
    "mxfp4_matmul": "mxfp4",
    "Fp8BlockLinear": "modules",
    "Mxfp4Linear": "modules",
    "Mxfp4Experts": "modules",
    "QuantizeResult": "modules",
    "quantize_linears": "modules",
    "quantized_bytes": "modules",
    "linear_weight": "modules",
    "mxfp4_experts_from_checkpoint": "modules",
    "fp8_checkpoint": "checkpoint",
    "gpt_oss_mxfp4_checkpoint": "checkpoint",
    "dequantize_checkpoint": "checkpoint",
    "swap_in_fp8_linears": "checkpoint",
    "FORMATS": "formats",
    "QuantFormat": "formats",
    "get_format": "formats",
    "stored_bytes": "formats",
    "compute_dtype": "formats",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'jalapeno.quant' has no attribute {name!r}")
    return getattr(importlib.import_module(f"jalapeno.quant.{mod}"), name)


def __dir__() -> list[str]:
    return __all__
