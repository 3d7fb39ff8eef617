"""Every chip states how its serving parameters were obtained (the confidence label of every answer)."""

import json
import re
from pathlib import Path

import pytest

from jalapeno.cli import main
from jalapeno.hardware import load_catalog
from jalapeno.hardware.confidence import confidence, trusted

DOCS = Path(__file__).resolve().parents[2] / "docs"
GPU_VENDORS = {"NVIDIA", "AMD"}


def test_every_chip_has_a_calibration_consistent_with_docs_fidelity():
    cat = load_catalog()
    h200 = cat["h200"].calibration
    # the H200 fit: "234 rows, 82 configurations" and the held-out later-H200 throughput error, in docs/fidelity.md
    doc = (DOCS / "fidelity.md").read_text(encoding="utf-8")
    configs = int(re.search(r"(\d+) rows, (\d+) configurations", doc).group(2))
    held = re.search(r"\| held-out: H200 InferenceX 2026-03\+ \| output_tput_per_gpu \| \d+ \| [\d.]+ \| [\d.]+ \| ([\d.]+) \|", doc)
    h100 = re.search(r"\| held-out: H100 \(fractions copied from H200\) \| output_tput_per_gpu \| \d+ \| [\d.]+ \| [\d.]+ \| ([\d.]+) \|", doc)
    assert (h200.status, h200.points, h200.median_error_pct) == ("calibrated", configs, float(held.group(1)))
    assert cat["h100"].calibration.status == "transferred" and cat["h100"].calibration.transferred_from == "h200"
    assert cat["h100"].calibration.median_error_pct == float(h100.group(1))
    for key, chip in cat.items():
        cal = chip.calibration
        assert cal.source, key
        if chip.vendor in GPU_VENDORS and key not in ("h200",):
            assert cal.status == "transferred" and cal.transferred_from in cat, key
        elif cal.status == "calibrated" and key != "h200":  # a non-GPU chip fitted to a published figure
            assert cal.points >= 1 and "fitted" in cal.source, key


def test_confidence_is_the_weakest_chip():
    cat = load_catalog()
    one = confidence([("serving", cat["h200"])])
    assert one["status"] == "calibrated" and one["label"] == cat["h200"].calibration.label() and one["points"] == cat["h200"].calibration.points
    two = confidence([("prefill", cat["h200"]), ("decode", cat["b200"])])
    assert two["status"] == "transferred" and two["label"] == "prefill h200: calibrated (" + two["label"].split("(", 1)[1]
    assert trusted("transferred", "transferred") and not trusted("uncalibrated", "transferred")
    assert trusted("uncalibrated", "any") and not trusted("transferred", "calibrated")


def _run(capsys, *args: str) -> str:
    try:
        main(list(args))
    except SystemExit as exc:  # typer may exit 0 explicitly
        assert exc.code in (0, None), capsys.readouterr().err
    return capsys.readouterr().out


def test_hardware_list_and_show_print_the_label(capsys, monkeypatch):
    rows = {d["key"]: d for d in json.loads(_run(capsys, "hardware", "list", "--json"))}
    assert rows["h200"]["confidence"]["status"] == "calibrated"
    assert rows["groq-lp30"]["confidence"] == {"status": "uncalibrated", "label": "uncalibrated", "points": 0,
                                               "median_error_pct": None, "transferred_from": None}
    assert json.loads(_run(capsys, "hardware", "show", "b200", "--json"))["calibration"]["label"] == "transferred from h200"
    monkeypatch.setenv("COLUMNS", "200")
    assert "Confidence: transferred from h200" in _run(capsys, "hardware", "show", "mi300x")
    table = _run(capsys, "hardware", "list")
    assert "confidence" in table and "calibrated (" in table and "transferred (h200)" in table
