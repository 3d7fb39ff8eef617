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


def _held_out(doc: str, label: str, fit: str) -> float:
    """Median |error| of output tok/s per chip in docs/fidelity.md's #13 table row ``label`` / ``fit``."""
    m = re.search(r"\| " + re.escape(label) + r" \| " + re.escape(fit) + r" \| \d+ \| ([\d.]+) /", doc)
    assert m, (label, fit)
    return float(m.group(1))


def test_every_chip_has_a_calibration_consistent_with_docs_fidelity():
    """Each GPU family's fit (issue #13) is stated in its chips' calibration blocks with the held-out error that
    docs/fidelity.md reports; the other GPUs say which fit they carry."""
    cat = load_catalog()
    doc = (DOCS / "fidelity.md").read_text(encoding="utf-8")
    fits = {"h200": ("H200 held out (2026-03+)", "H200 fit", 82), "b200": ("B200 held out (2026-01+)", "B200 fit", 120),
            "mi355x": ("MI355X held out (2026-01+)", "MI355X fit", 57)}
    for key, (label, fit, configs) in fits.items():
        cal = cat[key].calibration
        assert (cal.status, cal.points) == ("calibrated", configs), key
        assert f"{configs} configurations" in doc, key
        assert cal.median_error_pct == _held_out(doc, label, fit), key
    h100 = cat["h100"].calibration
    assert h100.status == "transferred" and h100.transferred_from == "h200"
    assert h100.median_error_pct == _held_out(doc, "H100 held out (all rows)", "H200 fit")
    family = {"b300": "b200", "gb200": "b200", "gb300": "b200", "vera-rubin": "b200", "mi300x": "mi355x",
              "mi325x": "mi355x"}
    for key, chip in cat.items():
        cal = chip.calibration
        assert cal.source, key
        if key in family:
            assert cal.status == "transferred" and cal.transferred_from == family[key], key
        elif chip.vendor in GPU_VENDORS:
            assert key in fits or key == "h100", key
        elif cal.status == "calibrated":  # a non-GPU chip fitted to a published figure
            assert cal.points >= 1 and "fitted" in cal.source, key


def test_confidence_is_the_weakest_chip():
    cat = load_catalog()
    one = confidence([("serving", cat["h200"])])
    assert one["status"] == "calibrated" and one["label"] == cat["h200"].calibration.label() and one["points"] == cat["h200"].calibration.points
    two = confidence([("prefill", cat["h200"]), ("decode", cat["gb200"])])
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
    assert json.loads(_run(capsys, "hardware", "show", "gb200", "--json"))["calibration"]["label"] == "transferred from b200"
    monkeypatch.setenv("COLUMNS", "200")
    assert "Confidence: transferred from mi355x" in _run(capsys, "hardware", "show", "mi300x")
    table = _run(capsys, "hardware", "list")
    assert "confidence" in table and "calibrated (" in table and "transferred (b200)" in table
