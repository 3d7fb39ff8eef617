"""Weight storage formats: element width, block-scale layout, bytes per element, compute dtype per chip.

Pure data, no torch: the cost model and the simulator read this table; the quantizers in
:mod:`jalapeno.quant.fp8` / :mod:`jalapeno.quant.mxfp4` produce exactly these layouts, and a test checks that
:func:`QuantFormat.bytes_per_element` agrees with :data:`jalapeno.models.arch.BYTES_PER_ELEMENT`.

Block shapes are ``(rows, cols)`` over the last two dims of a weight stored as ``[out_features, in_features]``
(``[N, K]``, the ``nn.Linear`` layout); ``cols`` runs along the reduction dim K. ``None`` means one scale per
2-D matrix (per-tensor), whose bytes are negligible and left out of :attr:`bytes_per_element` (as in ``arch``)
but counted exactly by :func:`stored_bytes`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from jalapeno.errors import ConfigError, UnknownNameError


@dataclass(frozen=True)
class QuantFormat:
    """One weight storage format.

    ``element_bits``: bits per stored value. ``block``: elements sharing one scale, ``(rows, cols)``, or None
    for per-tensor / no scale. ``scale_dtype``/``scale_bytes``: how each scale is stored (bytes per scale).
    ``compute_preference``: compute dtypes (names of :data:`jalapeno.hardware.schema.COMPUTE_DTYPES`) a chip
    may execute this format in, best first: the first one the chip runs natively is used.
    """

    name: str
    element_bits: int
    block: tuple[int, int] | None
    scale_dtype: str | None
    scale_bytes: int
    compute_preference: tuple[str, ...]
    description: str = ""

    @property
    def bytes_per_element(self) -> float:
        """Bytes per weight element including block scales (per-tensor scales amortize to zero)."""
        per = self.element_bits / 8
        if self.block is not None:
            per += self.scale_bytes / (self.block[0] * self.block[1])
        return per


FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in (
        QuantFormat("fp32", 32, None, None, 0, ("fp32", "bf16"), "IEEE float32"),
        QuantFormat("bf16", 16, None, None, 0, ("bf16", "fp16"), "bfloat16"),
        QuantFormat("fp16", 16, None, None, 0, ("fp16", "bf16"), "IEEE float16"),
        QuantFormat(
            "fp8", 8, (128, 128), "fp32", 4, ("fp8", "bf16"),
            "E4M3 (fn) with one fp32 scale per 128x128 block (DeepSeek-V3/R1 weight_scale_inv)",
        ),
        QuantFormat(
            "fp8_per_tensor", 8, None, "fp32", 4, ("fp8", "bf16"), "E4M3 (fn) with one fp32 scale per tensor"
        ),
        QuantFormat(
            "mxfp4", 4, (1, 32), "e8m0", 1, ("fp4", "fp8", "bf16"),
            "OCP MX v1.0 MXFP4: E2M1 packed two per byte, one E8M0 scale per 32 elements along K (GPT-OSS)",
        ),
        QuantFormat(
            "int4", 4, (1, 128), "bf16", 2, ("int4", "bf16"),
            "int4 packed two per byte, one bf16 scale per group of 128 along K",
        ),
        QuantFormat("int8", 8, None, "fp32", 4, ("int8", "bf16"), "int8 with a per-tensor scale"),
    )
}


def get_format(name: str) -> QuantFormat:
    """Look up a format by name (``fp8``, ``mxfp4``, ...)."""
    try:
        return FORMATS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown weight format {name!r}; choose one of: {', '.join(sorted(FORMATS))}"
        ) from None


def compute_dtype(fmt: str | QuantFormat, native: Iterable[str]) -> str:
    """Compute dtype a chip uses for ``fmt``, given the dtypes it runs natively (e.g. ``chip.compute_tflops``).

    MXFP4 runs on FP4 tensor cores where they exist (Blackwell, Jalapeño), else is dequantized to FP8 or bf16
    in registers (weight-only); FP8 falls back to bf16 on chips without FP8 (A100, TPU v5e, ...).
    """
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    have = set(native)
    for dt in f.compute_preference:
        if dt in have:
            return dt
    raise ConfigError(
        f"format {f.name!r} needs one of {list(f.compute_preference)} as a native compute dtype; "
        f"the chip has {sorted(have)}"
    )


def scale_grid(shape: Sequence[int], fmt: str | QuantFormat) -> tuple[int, ...]:
    """Shape of the scale tensor for a weight of ``shape`` (last two dims blocked, partial edge blocks padded)."""
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    dims = _as_matrix_shape(shape)
    if f.scale_dtype is None:
        return ()
    *lead, n, k = dims
    if f.block is None:
        return tuple(lead)
    return (*lead, math.ceil(n / f.block[0]), math.ceil(k / f.block[1]))


def stored_bytes(shape: Sequence[int], fmt: str | QuantFormat) -> int:
    """Exact bytes a weight of ``shape`` occupies in ``fmt``: packed elements plus every scale.

    Edge blocks that do not divide evenly still carry a whole scale (DeepSeek's partial last block); a row
    of an odd number of 4-bit values rounds up to whole bytes. Leading dims (experts) multiply.
    """
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    *lead, n, k = _as_matrix_shape(shape)
    mats = math.prod(lead)
    element = mats * n * math.ceil(k * f.element_bits / 8)
    scales = math.prod(scale_grid(shape, f)) * f.scale_bytes if f.scale_dtype is not None else 0
    return element + scales


def _as_matrix_shape(shape: Sequence[int]) -> tuple[int, ...]:
    dims = tuple(int(d) for d in shape)
    if not dims or any(d < 0 for d in dims):
        raise ConfigError(f"weight shape must be a non-empty tuple of non-negative ints, got {tuple(shape)}")
    return (1, *dims) if len(dims) == 1 else dims
