"""Error statistics of predictions against measurements (pure functions over plain floats)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np


def pct_error(pred: float, meas: float) -> float:
    """Signed error of ``pred`` relative to ``meas`` in percent: 100 (pred - meas) / meas."""
    if meas == 0:
        raise ValueError("measured value is 0: relative error undefined")
    return 100.0 * (pred - meas) / meas


def log_error(pred: float, meas: float) -> float:
    """ln(pred / meas): symmetric in over/under-prediction (a factor 2 either way is ±0.69)."""
    if pred <= 0 or meas <= 0:
        raise ValueError("log error needs positive values")
    return math.log(pred / meas)


@dataclass(frozen=True)
class ErrorSummary:
    """Median and 90th-percentile absolute % error, median signed % error (bias), and the count."""

    n: int
    median_abs: float
    p90_abs: float
    median_signed: float

    def row(self) -> list[str]:
        if not self.n:
            return ["0", "-", "-", "-"]
        return [str(self.n), f"{self.median_abs:.1f}", f"{self.p90_abs:.1f}", f"{self.median_signed:+.1f}"]


def summarize(errors_pct: Iterable[float]) -> ErrorSummary:
    """Summary of signed % errors (NaNs dropped). p90 uses linear interpolation (numpy default)."""
    e = np.array([x for x in errors_pct if x == x], dtype=float)
    if e.size == 0:
        return ErrorSummary(0, math.nan, math.nan, math.nan)
    a = np.abs(e)
    return ErrorSummary(int(e.size), float(np.median(a)), float(np.percentile(a, 90)), float(np.median(e)))


def spread_pct(values: Iterable[float]) -> float:
    """Spread of repeated measurements of one configuration: 100 (max - min) / median."""
    v = np.array(list(values), dtype=float)
    if v.size < 2:
        return 0.0
    return float(100.0 * (v.max() - v.min()) / np.median(v))
