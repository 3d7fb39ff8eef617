"""The serving layer's latency per request, measured by the probe (issue 16, thirteenth session): `jalapeno serve`'s
app over an idle simulated engine, driven by the bench's closed-loop client, the median of send -> engine thread
from the step trace's request records, written as `efficiency.request_overhead_ms` (a measured Fact) and kept by
`calibrate --probe`. Without it a probed chip prices 0, and every simulated closed-loop replacement joins the step
that starts at its predecessor's completion, which a served one never can (tests/server/test_lineup.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import jalapeno.hardware.probe as pr

ROOT = Path(__file__).resolve().parents[2]
CHIP = ROOT / "benchmarks" / "data" / "local_probe_quiet_1750.yaml"


def test_the_front_end_is_timed_on_the_served_app() -> None:
    from jalapeno.calibration.front_end import measure_front_end

    res = pr.ProbeResult("cpu", "test", 1.0)
    measure_front_end(res, (4, 8, 64, 2))
    samples = res.samples["front end s"]
    assert not res.notes and len(samples) == 8 and min(samples) > 0
    assert res.front_end_ms == pytest.approx(1e3 * float(np.median(samples)))
    assert res.front_end_ms < 2000  # an HTTP round trip on this machine, not a step


def test_a_front_end_that_cannot_be_timed_is_a_note(monkeypatch) -> None:
    import jalapeno.server.build as build
    from jalapeno.calibration.front_end import measure_front_end

    def broken(*a, **k):
        raise OSError("no sockets here")

    monkeypatch.setattr(build, "build_sim", broken)
    res = pr.ProbeResult("cpu", "test", 1.0)
    measure_front_end(res, (2, 2, 8, 1))
    assert res.front_end_ms is None and res.notes == ["serving front end: not measured (OSError: no sockets here)"]


def test_the_measured_front_end_is_a_fact_of_the_chip_and_survives_calibrate(tmp_path) -> None:
    """Into the chip: request_overhead_ms with a measured Fact; into the notes, from which `calibrate --probe`
    rebuilds the chip (probe_from_chip): the value comes back."""
    import yaml

    from jalapeno.calibration.probe_fit import fitted_chip_dict, probe_from_chip, refit_probe_file
    from jalapeno.hardware.catalog import load_spec_file

    res = probe_from_chip(load_spec_file(CHIP))
    assert res.front_end_ms is None  # the 17:50 probe predates the measurement
    res.front_end_ms = 7.25
    data = fitted_chip_dict(res, "local", "a test")
    data["notes"] = pr._measurement_notes(res)
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    chip = load_spec_file(path)
    assert chip.efficiency.request_overhead_ms == 7.25
    fact = chip.efficiency.fitted["request_overhead_ms"]
    assert fact.status == "measured" and fact.value == 7.25
    out, line = refit_probe_file(path, tmp_path / "refit", "jalapeno calibrate --probe (test)", front_end=True)
    assert load_spec_file(out).efficiency.request_overhead_ms == 7.25  # recorded: not timed again
    assert "request_overhead_ms 7.25" in line
    assert load_spec_file(CHIP).efficiency.request_overhead_ms == 0  # the recorded probe itself: unchanged


def test_calibrate_times_the_front_end_of_a_probe_without_one(tmp_path) -> None:
    """The 17:50 probe has none: `calibrate --probe` (front_end=True) times it now and writes it with its notes line;
    without the flag (the library default) the refit leaves it at 0."""
    import shutil

    from jalapeno.calibration.probe_fit import probe_from_chip, refit_probe_file
    from jalapeno.hardware.catalog import load_spec_file

    src = tmp_path / "local.yaml"
    shutil.copy(CHIP, src)
    plain, _ = refit_probe_file(src, tmp_path / "plain", "test")
    assert load_spec_file(plain).efficiency.request_overhead_ms == 0
    timed, _ = refit_probe_file(src, tmp_path / "timed", "test", front_end=True)
    chip = load_spec_file(timed)
    assert 0 < chip.efficiency.request_overhead_ms < 2000
    assert chip.efficiency.fitted["request_overhead_ms"].status == "measured"
    assert probe_from_chip(chip).front_end_ms == pytest.approx(chip.efficiency.request_overhead_ms, abs=0.01)
