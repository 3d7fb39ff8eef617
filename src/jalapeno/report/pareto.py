"""Pareto fronts (pure): the points no other point beats on both axes.

InferenceX plots throughput per GPU against interactivity (tokens/s/user = 1000 / median TPOT); a serving
configuration is worth considering only if no other configuration is at least as good on both. The three
fronts the report draws, all against ``median_interactivity`` (higher is better):

* ``output_throughput_per_chip`` (higher is better),
* ``output_tokens_per_mw`` (higher is better),
* ``usd_per_mtok`` (lower is better).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable, Mapping, Sequence

#: name -> (y column, maximize y)
FRONTS: dict[str, tuple[str, bool]] = {
    "throughput_per_chip": ("output_throughput_per_chip", True),
    "throughput_per_mw": ("output_tokens_per_mw", True),
    "usd_per_mtok": ("usd_per_mtok", False),
}
X_COLUMN = "median_interactivity"


def pareto_front(xs: Sequence[float], ys: Sequence[float], maximize_x: bool = True, maximize_y: bool = True) -> list[int]:
    """Indices of the non-dominated points, ordered by x ascending. A point is dominated when another is at
    least as good on both axes and strictly better on one. NaN/None coordinates are never on the front;
    exact duplicates keep the first."""
    sx = 1.0 if maximize_x else -1.0
    sy = 1.0 if maximize_y else -1.0
    pts = [
        (sx * float(x), sy * float(y), i)
        for i, (x, y) in enumerate(zip(xs, ys))
        if x is not None and y is not None and not math.isnan(float(x)) and not math.isnan(float(y))
    ]
    # sweep by x descending (best first), ties broken by y descending: a point is on the front iff its y beats
    # every point seen before it (all of which have x >= its x)
    pts.sort(key=lambda p: (-p[0], -p[1], p[2]))
    front: list[int] = []
    best_y = -math.inf
    for x, y, i in pts:
        if y > best_y:
            front.append(i)
            best_y = y
    return sorted(front, key=lambda i: (float(xs[i]), i))


def fronts_by_group(
    rows: Iterable[Mapping],
    y: str,
    maximize_y: bool = True,
    x: str = X_COLUMN,
    group_by: Sequence[str] = ("model", "hardware"),
) -> dict[tuple, list[Mapping]]:
    """Pareto front of ``y`` vs ``x`` for each group (default: per model and chip), rows ordered by x."""
    groups: dict[tuple, list[Mapping]] = defaultdict(list)
    for r in rows:
        groups[tuple(r.get(k) for k in group_by)].append(r)
    out: dict[tuple, list[Mapping]] = {}
    for key, rs in groups.items():
        idx = pareto_front([_f(r.get(x)) for r in rs], [_f(r.get(y)) for r in rs], True, maximize_y)
        if idx:
            out[key] = [rs[i] for i in idx]
    return out


def _f(v: object) -> float:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
