"""The torch backend's execution choices come from this machine's probe (``local.yaml``), not a constant."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jalapeno.backends.torch.runner import DecodePolicy
from jalapeno.hardware import probe as pr
from jalapeno.hardware.probe import apply_measured_choices


class _Target:
    def __init__(self) -> None:
        self.policy = DecodePolicy()

    def set_decode_policy(self, policy: DecodePolicy) -> None:
        self.policy = policy


def _probed(root: Path, fused: dict[int, float], torch_: dict[int, float], copy: dict[int, float],
            dot: dict[int, float] | None = None) -> Path:
    res = pr.ProbeResult("cpu", "hand-made", 8.0, read_gbps=copy, copy_gbps=copy,
                         matmul_tflops={"fp32": {"prefill-512": 0.1}}, fused_step_s=fused, torch_step_s=torch_,
                         dot_step_s=dot or {})
    return pr.write_chip(res, root, "local", "hand-made for tests").parent


@pytest.mark.parametrize(
    ("fused", "torch_", "cap"),
    [({1: 1.0, 8: 2.0, 32: 5.0}, {1: 3.0, 8: 4.0, 32: 4.0}, 8), ({1: 4.0, 8: 5.0}, {1: 3.0, 8: 4.0}, 0)],
)
def test_backend_takes_the_crossover_the_probe_measured(tmp_path: Path, fused, torch_, cap) -> None:
    old = torch.get_num_threads()
    target = _Target()
    try:
        line = apply_measured_choices(target, torch.device("cpu"), _probed(tmp_path, fused, torch_, {1: 9.0, 2: 9.1}))
        assert target.policy.fused_max_batch == cap
        assert torch.get_num_threads() == 1  # a second thread added < 3% bandwidth
        assert f"fused crossover {cap}" in line and "measured on this machine" in line
    finally:
        torch.set_num_threads(old)


def test_backend_takes_the_panel_threshold_the_probe_measured(tmp_path: Path) -> None:
    """Panels beat the dot tiles from 8 rows; at 1 row the dot tiles (2.0 s) beat PyTorch (3.0 s) though the
    panels (4.0 s) do not: the kernel's better GEMM kind counts for the crossover."""
    old = torch.get_num_threads()
    target = _Target()
    fused, dot, torch_ = {1: 4.0, 8: 2.0, 32: 3.0}, {1: 2.0, 8: 2.5, 32: 5.0}, {1: 3.0, 8: 4.0, 32: 4.0}
    try:
        line = apply_measured_choices(target, torch.device("cpu"), _probed(tmp_path, fused, torch_, {1: 9.0}, dot))
    finally:
        torch.set_num_threads(old)
    assert target.policy == DecodePolicy(fused_max_batch=32, panel_min_rows=8)
    assert "panel GEMMs from 8 rows" in line


def test_without_a_probe_the_defaults_stay_and_say_so(tmp_path: Path) -> None:
    target = _Target()
    line = apply_measured_choices(target, torch.device("cpu"), tmp_path)
    assert target.policy == DecodePolicy() and "run `jalapeno hardware probe`" in line
