"""``benchmarks/fit_terms.py --reruns latest``: a configuration's fit point is the median over the reruns of its
latest date only (the serving stack's newest release in the fit half), checked against the raw CSV rows.

The reference is read straight from ``benchmarks/data/calibration-blackwell-amd.csv`` with the csv module: MI355X
DeepSeek-R1 FP8 SGLang TP8 1k/8k at concurrency 4, which InferenceX re-ran on five December days (TPOT 18.7-34.3 ms,
an older SGLang release) and three times under the image tags of the "2025-12..2026-01" artifact (14.7 ms).
"""

from __future__ import annotations

import csv
import importlib.util
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CSV = ROOT / "benchmarks" / "data" / "calibration-blackwell-amd.csv"


def _fit_terms():
    spec = importlib.util.spec_from_file_location("fit_terms", ROOT / "benchmarks" / "fit_terms.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _raw_tpots() -> dict[str, list[float]]:
    """date -> median TPOT rows (seconds) of the configuration, from the CSV itself."""
    out: dict[str, list[float]] = {}
    for r in csv.DictReader(CSV.open()):
        if (r["hardware"] == "mi355x" and r["model"] == "DeepSeek-R1-0528" and r["precision"] == "fp8"
                and r["framework"].startswith("sglang") and r["parallelism"].startswith("TP8 EP1 DPattn=False")
                and r["isl"] == "1024" and r["osl"] == "8192" and r["concurrency_or_batch"] == "4"
                and "disagg=False" in r["notes"] and "spec_decoding=none" in r["notes"]
                and r["metric"] == "median_tpot" and r["date"][:7] < "2026-01"):
            unit = 1e-3 if r["unit"].startswith("ms") else 1.0
            out.setdefault(r["date"], []).append(float(r["value"]) * unit)
    return out


def test_latest_reruns_take_the_median_of_the_latest_date_only():
    ft = _fit_terms()
    raw = _raw_tpots()
    assert len(raw) >= 3, raw  # several rerun dates in the fit half
    latest = max(raw)
    assert latest.startswith("2025-12..")  # the undated artifact sorts after every December day
    items = [(p, s) for p, s in ft.usable_points({"mi355x"}) if ft.split_of(p, s) == "fit"
             and s.model == "deepseek-r1" and s.weights == "native" and s.framework == "sglang"
             and s.layout.tp == 8 and s.isl == 1024 and s.osl == 8192 and s.concurrency == 4]
    every = [t for ts in raw.values() for t in ts]
    assert len(items) == len(every)
    (p_med, _), = ft.dedupe(items)
    (p_last, _), = ft.dedupe(items, "latest")
    assert abs(p_med.metrics["median_tpot"] - statistics.median(every)) < 1e-9
    assert abs(p_last.metrics["median_tpot"] - statistics.median(raw[latest])) < 1e-9
    assert p_last.metrics["median_tpot"] < 0.85 * p_med.metrics["median_tpot"]  # the older release was slower
    assert len(p_last.ids) < len(p_med.ids)
