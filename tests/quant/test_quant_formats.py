"""The format table agrees with arch.BYTES_PER_ELEMENT; stored_bytes is exact (hand-counted)."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources

import pytest
import yaml

from jalapeno.errors import ConfigError, UnknownNameError
from jalapeno.models.arch import BYTES_PER_ELEMENT
from jalapeno.quant import formats


def test_table_matches_arch_bytes_per_element() -> None:
    assert set(formats.FORMATS) == set(BYTES_PER_ELEMENT)
    for name, bpe in BYTES_PER_ELEMENT.items():
        assert formats.FORMATS[name].bytes_per_element == pytest.approx(bpe, rel=0, abs=1e-15), name


@pytest.mark.parametrize(
    ("shape", "fmt", "expected"),
    [
        ((256, 256), "fp8", 256 * 256 + 2 * 2 * 4),
        ((100, 200), "fp8", 100 * 200 + 1 * 2 * 4),  # partial edge blocks carry a full scale
        ((3, 130, 129), "fp8", 3 * (130 * 129 + 2 * 2 * 4)),  # stacked experts
        ((7168, 2048), "fp8", 7168 * 2048 + 56 * 16 * 4),
        ((64, 2880), "mxfp4", 64 * 1440 + 64 * 90),
        ((32, 5760, 2880), "mxfp4", 32 * (5760 * 1440 + 5760 * 90)),
        ((10, 256), "int4", 10 * 128 + 10 * 2 * 2),
        ((10, 256), "bf16", 10 * 256 * 2),
        ((4, 10, 256), "fp8_per_tensor", 4 * (10 * 256 + 4)),
        ((7,), "fp32", 28),
    ],
)
def test_stored_bytes_hand_counted(shape: tuple[int, ...], fmt: str, expected: int) -> None:
    assert formats.stored_bytes(shape, fmt) == expected


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4", "int4", "bf16", "fp32"])
def test_stored_bytes_equals_bytes_per_element_when_blocks_divide(fmt: str) -> None:
    shape = (2, 256, 512)
    assert formats.stored_bytes(shape, fmt) == BYTES_PER_ELEMENT[fmt] * 2 * 256 * 512


def test_compute_dtype_falls_back_in_preference_order() -> None:
    assert formats.compute_dtype("mxfp4", {"bf16", "fp8", "fp4"}) == "fp4"
    assert formats.compute_dtype("mxfp4", {"bf16", "fp8"}) == "fp8"
    assert formats.compute_dtype("fp8", {"bf16", "fp16"}) == "bf16"
    with pytest.raises(ConfigError, match="native compute dtype"):
        formats.compute_dtype("fp8", {"int8"})


def test_compute_dtype_on_catalog_chips() -> None:
    chips = resources.files("jalapeno.hardware") / "chips"

    def native(chip: str) -> set[str]:
        data = yaml.safe_load((chips / f"{chip}.yaml").read_text())
        return set(data["compute_tflops"])

    # Blackwell has FP4 tensor cores; Hopper runs MXFP4 weight-only on its FP8 path.
    assert formats.compute_dtype("mxfp4", native("b200")) == "fp4"
    assert formats.compute_dtype("mxfp4", native("h100")) == "fp8"
    assert formats.compute_dtype("fp8", native("h100")) == "fp8"


def test_unknown_format_and_bad_shape() -> None:
    with pytest.raises(UnknownNameError, match="mxfp4"):
        formats.get_format("nvfp5")
    with pytest.raises(ConfigError):
        formats.stored_bytes((), "fp8")
    assert formats.scale_grid((130, 129), "fp8") == (2, 2)
    assert formats.scale_grid((5, 64), "mxfp4") == (5, 2)


def test_formats_module_does_not_import_torch() -> None:
    code = "import sys, jalapeno.quant.formats as f; f.stored_bytes((4, 4), 'fp8'); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
