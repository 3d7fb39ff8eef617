"""Calibration against published measurements: rows -> points -> simulator inputs, predictions, error stats.

``benchmarks/fidelity.py`` drives it and writes ``docs/fidelity.md``.
"""

from jalapeno.calibration.points import (
    METRICS,
    Excluded,
    Layout,
    Point,
    SimSpec,
    config_key,
    framework_family,
    group_points,
    load_points,
    map_chip,
    map_model,
    map_weights,
    parse_layout,
    to_sim_spec,
)
from jalapeno.calibration.stats import ErrorSummary, log_error, pct_error, spread_pct, summarize

__all__ = [
    "METRICS",
    "ErrorSummary",
    "Excluded",
    "Layout",
    "Point",
    "SimSpec",
    "config_key",
    "framework_family",
    "group_points",
    "load_points",
    "log_error",
    "map_chip",
    "map_model",
    "map_weights",
    "parse_layout",
    "pct_error",
    "spread_pct",
    "summarize",
    "to_sim_spec",
]
