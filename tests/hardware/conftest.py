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
