"""Fixtures shared across test directories."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def tiny_llama_with_kernel(tmp_path: Path) -> Path:
    """A tiny Llama ``config.json`` (2 layers, hidden 64) for measurements through the fused CPU decode kernel; skips
    where torch or the kernel is not available."""
    pytest.importorskip("torch")
    from jalapeno.hardware import probe as pr
    from jalapeno.kernels.cpu_build import KernelUnavailable, load_kernel

    try:
        load_kernel("cpu_decode")
    except KernelUnavailable as exc:
        pytest.skip(f"no fused kernel here: {exc}")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(pr.llama_config(2, 64, 96, 128)))
    return cfg
