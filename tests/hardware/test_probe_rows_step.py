"""The probed chip's GEMM rate by rows steps to PyTorch's one row past the fused kernel's crossover (issue 16,
seventeenth session): a step of 129-511 rows runs the PyTorch path, at about PyTorch's rate at the crossover's rows,
not at the kernel's rate interpolated up to PyTorch's next measured row count."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "data" / "grid_check_0610_full_median"


def test_the_table_steps_to_pytorch_past_the_crossover(hand_made_probe_result) -> None:
    from jalapeno.calibration.probe_fit import rows_table
    from jalapeno.perf.model import rows_efficiency

    res = hand_made_probe_result()
    res.rows_tflops = {1: 0.01, 8: 0.03, 32: 0.05, 128: 0.08, 512: 0.1}
    table = rows_table(res, 0.9, 128)
    assert table[128] == pytest.approx(0.9)  # the kernel, at the compute fraction
    assert table[129] == pytest.approx(0.9 * 0.08 / 0.1)  # PyTorch at 128 rows, scaled as its other entries
    assert table[512] == pytest.approx(0.9)
    got = rows_efficiency(table, np.array([128.0, 129.0, 147.0, 512.0]))
    # by hand: log2-linear between (129, 0.72) and (512, 0.9) at 147 rows
    at147 = 0.72 + (0.9 - 0.72) * np.log2(147 / 129) / np.log2(512 / 129)
    assert got == pytest.approx([0.9, 0.72, at147, 0.9], rel=1e-4)
    # a crossover between measured row counts: PyTorch's rate there log2-linear between them (32 and 128 at 64)
    assert rows_table(res, 0.9, 64)[65] == pytest.approx(0.9 * 0.065 / 0.1)
    # no PyTorch row count above the crossover: nothing to step to
    assert 513 not in rows_table(res, 0.9, 512)


def _rows_line(text: str) -> dict[int, float]:
    import yaml

    line = next(n for n in yaml.safe_load(text)["notes"] if n.startswith("matmul TFLOPS by rows (M x 576 x 1536)"))
    return {int(a): float(b) for a, b in re.findall(r"(\d+): ([\d.]+)", line.split(":", 1)[1])}


def test_a_committed_chip_is_rewritten_as_calibrate_now_writes_it(tmp_path: Path) -> None:
    """The 06:11 probe's chip (fused crossover 128): the rewritten table gains 129 rows at the table's 512-row entry
    times PyTorch's 128 / 512-row TFLOPS from the probe's own notes line; only steps of 129-511 rows move."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import step_residuals as sr

    from jalapeno.hardware.catalog import load_spec_file
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim import cost_model_for

    chip = tmp_path / "local.yaml"
    shutil.copy(RUN / "local.yaml", chip)
    rates = _rows_line(chip.read_text())
    before = load_spec_file(chip)
    table = sr.rows_fixed(chip)
    after = load_spec_file(chip)
    old = dict(before.efficiency.compute_by_rows)
    assert table == {**old, 129: pytest.approx(old[512] * rates[128] / rates[512], abs=1e-5)}
    assert dict(after.efficiency.compute_by_rows) == table
    a, b = (cost_model_for("smollm2-135m", c, precision="fp32", kv="fp32") for c in (before, after))
    for shape in (StepShape.from_lists(decode_ctx=[300] * 32), StepShape.from_lists(prefill=[(100, 0)], decode_ctx=[150] * 28),
                  StepShape.from_lists(prefill=[(512, 0)])):  # 32, 128 and 512 rows: unchanged
        assert b.step(shape).time_s == pytest.approx(a.step(shape).time_s, rel=1e-9)
    mixed = StepShape.from_lists(prefill=[(116, 0)], decode_ctx=[150] * 31)  # 147 rows: PyTorch, slower than priced
    assert b.step(mixed).time_s > 1.05 * a.step(mixed).time_s
