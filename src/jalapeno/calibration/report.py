"""Error records and tables of predictions against measurements (markdown, and the scatter plot).

A *record* is one (point, metric) pair that both sides have: measured and predicted values, signed % error.
Tables group records by any key (chip, framework, model, concurrency band, ISL, fit/held-out split) and show
median and p90 |error| and the signed median, before and after a calibration.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from jalapeno.calibration.points import METRICS, Point, SimSpec
from jalapeno.calibration.stats import summarize


@dataclass(frozen=True)
class Record:
    point: Point
    spec: SimSpec
    metric: str
    meas: float
    pred: float

    @property
    def pct(self) -> float:
        return 100.0 * (self.pred - self.meas) / self.meas


Group = Callable[[Record], "str | None"]


def records(items: Sequence[tuple[Point, SimSpec]], preds: Sequence[dict]) -> list[Record]:
    """One record per (point, metric) measured and predicted (points whose prediction failed are skipped)."""
    out = []
    for (p, s), pr in zip(items, preds):
        if "error" in pr:
            continue
        for m, v in p.metrics.items():
            got = pr.get(m)
            if isinstance(got, float) and v > 0 and got > 0:
                out.append(Record(p, s, m, v, got))
    return out


def concurrency_band(c: int | None) -> str:
    """InferenceX concurrency in four bands (TPOT error changes sign across them)."""
    if c is None:
        return "offline"
    return "c <= 8" if c <= 8 else "c 16-64" if c <= 64 else "c 128-256" if c <= 256 else "c > 256"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _metric_order(m: str) -> int:
    return list(METRICS).index(m) if m in METRICS else len(METRICS)


def _grouped(recs: Sequence[Record], group: Group) -> dict[tuple[str, str], list[float]]:
    g: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in recs:
        k = group(r)
        if k is not None:
            g[(k, r.metric)].append(r.pct)
    return g


def summary_rows(recs: Sequence[Record], group: Group, metrics: Sequence[str] | None = None) -> list[list[str]]:
    """Rows: group, metric, n, median |%|, p90 |%|, median signed %."""
    g = _grouped(recs, group)
    keys = sorted((k for k in g if metrics is None or k[1] in metrics), key=lambda t: (t[0], _metric_order(t[1])))
    return [[k, m, *summarize(g[(k, m)]).row()] for k, m in keys]


BEFORE_AFTER_HEADER = ["group", "metric", "n", "before median |%|", "before p90 |%|", "after median |%|",
                       "after p90 |%|", "after median signed %"]


def before_after_rows(before: Sequence[Record], after: Sequence[Record], group: Group,
                      metrics: Sequence[str] | None = None) -> list[list[str]]:
    """Rows of :data:`BEFORE_AFTER_HEADER` for every (group, metric) the *after* records have."""
    gb, ga = _grouped(before, group), _grouped(after, group)
    rows = []
    for key in sorted((k for k in ga if metrics is None or k[1] in metrics), key=lambda t: (t[0], _metric_order(t[1]))):
        b, a = summarize(gb.get(key, [])), summarize(ga[key])
        rows.append([key[0], key[1], str(a.n), f"{b.median_abs:.1f}", f"{b.p90_abs:.1f}", f"{a.median_abs:.1f}",
                     f"{a.p90_abs:.1f}", f"{a.median_signed:+.1f}"])
    return rows


MODEL_COLORS = {"deepseek-r1": "tab:red", "gpt-oss-120b": "tab:blue", "gpt-oss-20b": "tab:cyan",
                "llama-3.3-70b": "tab:green", "llama-3.1-8b": "tab:olive", "llama-3.1-405b": "tab:brown",
                "qwen3-235b-a22b": "tab:purple"}
CHIP_MARKERS = {"h200": "o", "h100": "^", "b200": "s", "mi355x": "D"}


def scatter(recs: Sequence[Record], path: Path, title: str) -> None:
    """Predicted vs measured, one panel per metric, log-log, colour = model, marker = chip; dotted ±30%."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    metrics = [m for m in METRICS if any(r.metric == m for r in recs)]
    cols = 4
    rows = max(1, math.ceil(len(metrics) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 4.0 * rows))
    for ax, m in zip(np.ravel(axes), metrics):
        rs = [r for r in recs if r.metric == m]
        for model, color in MODEL_COLORS.items():
            for chip, marker in CHIP_MARKERS.items():
                sel = [r for r in rs if r.spec.model == model and r.spec.chip == chip]
                if sel:
                    ax.scatter([r.meas for r in sel], [r.pred for r in sel], s=10, c=color, marker=marker,
                               alpha=0.6, label=f"{model} {chip.upper()}")
        lo = min(min(r.meas, r.pred) for r in rs) / 1.5
        hi = max(max(r.meas, r.pred) for r in rs) * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        for f in (0.7, 1.3):
            ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_title(f"{m} ({METRICS[m][1]})", fontsize=9)
        ax.set_xlabel("measured", fontsize=8)
        ax.set_ylabel("predicted", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
    for ax in np.ravel(axes)[len(metrics):]:
        ax.axis("off")
    uniq: dict = {}
    for ax in np.ravel(axes):
        h, lab = ax.get_legend_handles_labels()
        uniq.update(zip(lab, h))
    fig.legend(list(uniq.values()), list(uniq.keys()), loc="lower center", fontsize=7, ncol=6, markerscale=2)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.1, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
