"""The Triton paged decode kernel, run by Triton's interpreter on CPU (no GPU in CI), against the PyTorch
reference path (itself checked against float64 numpy in test_attention.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")


def test_triton_paged_decode_matches_reference_in_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    script = Path(__file__).with_name("_triton_check.py")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("max abs err") == 5
