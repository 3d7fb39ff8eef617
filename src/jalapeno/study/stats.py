"""The claim statistics (docs/jalapeno-study.md, "Ratio definitions"): Pareto fronts (``report.pareto``),
throughput at an interactivity target, best E2E latency, and the ratios of Jalapeño to a baseline."""

from __future__ import annotations

import math

from jalapeno.report.pareto import pareto_front
from jalapeno.study.design import INTERACTIVE_FRACTIONS

def front(points: list[dict]) -> list[tuple[float, float]]:
    """Pareto front (interactivity, throughput per chip), interactivity ascending, throughput descending
    (:func:`jalapeno.report.pareto.pareto_front`, both maximised)."""
    idx = pareto_front([p["inter"] for p in points], [p["tput"] for p in points])
    return [(points[i]["inter"], points[i]["tput"]) for i in idx]


def tput_at(fr: list[tuple[float, float]], target: float) -> float:
    """Throughput per chip on the front at interactivity ``target`` (log-log interpolation); nan if the
    front never reaches it; the front's best throughput when every point is more interactive."""
    if not fr or target > fr[-1][0]:
        return math.nan
    if target <= fr[0][0]:
        return fr[0][1]
    for (x0, y0), (x1, y1) in zip(fr, fr[1:]):
        if x0 <= target <= x1:
            w = (math.log(target) - math.log(x0)) / (math.log(x1) - math.log(x0)) if x1 > x0 else 0.0
            return math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))
    return math.nan


def best_e2e(points: list[dict], c: int) -> float:
    v = [p["e2e_s"] for p in points if p["concurrency"] == c]
    return min(v) if v else math.nan


def gmean(xs) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def ratios(jal: list[dict], base: list[dict], concs, max_chips: int = 1 << 30) -> dict:
    """The claim statistics of one (model, workload): Jalapeño points (replicas of at most ``max_chips``)
    vs one baseline's points."""
    jal = [p for p in jal if p["chips"] <= max_chips]
    out = {"tokens_per_w": max(p["tpj"] for p in jal) / max(p["tpj"] for p in base)}
    out["e2e_by_c"] = {c: best_e2e(base, c) / best_e2e(jal, c) for c in concs}
    fj, fb = front(jal), front(base)
    top = fb[-1][0]
    out["interactive_by_f"] = {f: tput_at(fj, f * top) / tput_at(fb, f * top) for f in INTERACTIVE_FRACTIONS}
    out["peak_tput"] = max(p["tput"] for p in jal) / max(p["tput"] for p in base)
    out["max_inter"] = fj[-1][0] / top
    return out


def summarize(rs: list[dict]) -> dict:
    """Geometric means and ranges of the claim statistics over workloads (and concurrencies / targets)."""
    tpw = [r["tokens_per_w"] for r in rs]
    e2e = [v for r in rs for v in r["e2e_by_c"].values()]
    inter = [v for r in rs for v in r["interactive_by_f"].values()]
    def rng(xs: list[float]) -> tuple[float, float]:
        ok = [x for x in xs if math.isfinite(x)]
        return (min(ok), max(ok)) if ok else (math.nan, math.nan)

    return {"tokens_per_w": gmean(tpw), "tokens_per_w_range": rng(tpw), "e2e": gmean(e2e), "e2e_range": rng(e2e),
            "interactive": gmean(inter), "interactive_range": rng(inter)}
