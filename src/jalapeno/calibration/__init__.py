"""Calibration against measurements: rows -> points -> simulator inputs, predictions, fits, error tables.

``points`` (published rows -> points -> :class:`SimSpec`, disaggregated layouts -> pools), ``inputs`` (checked
CSV / ``jalapeno bench`` JSON), ``fit`` (named efficiency parameters: Gauss-Newton over ``linearise``d simulations, ``gauss_newton``), ``overlay`` (the chip
YAML a fit writes), ``report`` (error tables, scatter), ``mtp`` (fitted MTP acceptance). ``jalapeno calibrate``
(``commands``) and ``benchmarks/fidelity.py`` (``docs/fidelity.md``) drive them.
"""

from jalapeno.calibration.points import (
    METRICS,
    DisaggLayout,
    Excluded,
    Layout,
    Pool,
    Point,
    SimSpec,
    config_key,
    framework_family,
    group_points,
    load_points,
    map_chip,
    map_model,
    map_weights,
    parse_disagg_layout,
    parse_layout,
    to_sim_spec,
)
from jalapeno.calibration.stats import ErrorSummary, log_error, pct_error, spread_pct, summarize

__all__ = [
    "METRICS",
    "DisaggLayout",
    "ErrorSummary",
    "Excluded",
    "Layout",
    "Pool",
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
    "parse_disagg_layout",
    "parse_layout",
    "pct_error",
    "spread_pct",
    "summarize",
    "to_sim_spec",
]
