"""Numbers for people: a few significant digits, thousands separators, and never an exponent."""

from __future__ import annotations

import math


def num(x: float, digits: int = 3) -> str:
    """``x`` with about ``digits`` significant digits (at most 6 decimals) and no exponent: 0.00683, 1,234,567,
    and ``<0.000001`` for what would round to zero."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = min(6, max(0, digits - 1 - math.floor(math.log10(abs(x)))))
    text = f"{x:,.{decimals}f}"
    if float(text.replace(",", "")) == 0:
        return f"<{10 ** -decimals:.{decimals}f}"
    return text
