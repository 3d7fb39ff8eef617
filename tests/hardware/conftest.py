"""Shared fixtures for the hardware catalogue tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jalapeno.hardware.catalog import BUILTIN_DIR


@pytest.fixture
def h200_data() -> dict:
    """The built-in H200 spec as a plain dict, to mutate into user / broken specs."""
    return yaml.safe_load((BUILTIN_DIR / "h200.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def write_spec(tmp_path: Path):
    """write_spec(data, name='chip.yaml', subdir='user') -> path of a YAML file in a fresh directory."""

    def _write(data: dict | str, name: str = "chip.yaml", subdir: str = "user") -> Path:
        d = tmp_path / subdir
        d.mkdir(exist_ok=True)
        p = d / name
        p.write_text(data if isinstance(data, str) else yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
        return p

    return _write


@pytest.fixture(autouse=True)
def _no_user_hardware_path(monkeypatch):
    """Tests start from the built-in catalogue only, whatever the developer's environment says."""
    monkeypatch.delenv("JALAPENO_HARDWARE_PATH", raising=False)


@pytest.fixture
def hand_made_probe_result():
    """hand_made_probe_result() -> a ProbeResult of a hand-made machine (20 GB/s read, 18 GB/s copy, a 0.1 TFLOPS
    fp32 matmul peak, 10 us per layer, a rows table, 90 MB and 6 layers per decode step) and no steps yet: the tests
    fill in the steps the cost model makes from known terms, then check that the fit finds those terms again."""
    import jalapeno.hardware.probe as pr

    def _make():
        res = pr.ProbeResult("cpu", "hand-made", 16.0, read_gbps={2: 20.0}, copy_gbps={2: 18.0},
                             matmul_tflops={"fp32": {"prefill-512": 0.1}})
        res.step_overhead_us, res.layer_overhead_us, res.seq_overhead_us = 0.0, 10.0, 0.0
        res.rows_tflops = {1: 0.01, 8: 0.03, 32: 0.05, 512: 0.1}
        res.decode_bytes, res.decode_layers = 90e6, 6
        return res

    return _make
