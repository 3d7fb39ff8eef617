"""The fit of Jalapeño's inferred parameters: a loss on the claim statistics and a coordinate search over
:data:`~jalapeno.study.design.GRID` from the prior."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from jalapeno.study.design import BASELINES, CLAIMS, GRID, LOADED_W_MAX, PRIOR, PRIOR_WEIGHT, SENSITIVITY, Params, \
    jal_layouts, jalapeno_chip
from jalapeno.study.points import run_tasks, tasks_for
from jalapeno.study.stats import ratios, summarize

FIT_MODEL = "gpt-oss-120b"
FIT_CONCS = (4, 16, 64, 256)


def loss(stats: dict, p: Params, max_watts: float) -> float:
    """Squared log distance of each claim statistic from its range's geometric midpoint, in units of the
    range's half-width (1.0 = at an edge); + a weak pull to the prior; + a penalty above 550 W."""
    total = 0.0
    for k, (lo, hi) in CLAIMS.items():
        s = stats[k]
        if not math.isfinite(s):
            return 1e6
        total += (math.log(s / math.sqrt(lo * hi)) / (0.5 * math.log(hi / lo))) ** 2
    for name, vals in SENSITIVITY.items():
        lo, hi = min(vals), max(vals)
        total += PRIOR_WEIGHT * ((getattr(p, name) - getattr(PRIOR, name)) / (hi - lo)) ** 2
    if max_watts > LOADED_W_MAX:
        total += 100 * ((max_watts - LOADED_W_MAX) / LOADED_W_MAX) ** 2 + 1.0
    return total


_MEMO: dict = {}


def evaluate(p: Params, base_pts: dict, workloads, concs, factor, pool, model=FIT_MODEL) -> tuple[float, dict, list]:
    """Loss, claim statistics and Jalapeño points of ``p`` on ``model`` (memoised per process)."""
    key = (p, tuple(workloads), tuple(concs), factor, model)
    if key not in _MEMO:
        _MEMO[key] = _evaluate(p, base_pts, workloads, concs, factor, pool, model)
    return _MEMO[key]


def _evaluate(p: Params, base_pts: dict, workloads, concs, factor, pool, model) -> tuple[float, dict, list]:
    chip = jalapeno_chip(p)
    pts = run_tasks(tasks_for(model, chip, "jalapeno", jal_layouts(model), workloads, concs, factor), pool)
    rs = []
    for b in BASELINES:
        for w in workloads:
            jw = [q for q in pts if (q["isl"], q["osl"]) == w]
            bw = [q for q in base_pts[b] if (q["isl"], q["osl"]) == w]
            rs.append(ratios(jw, bw, concs))
    st = summarize(rs)
    watts = max(q["watts"] for q in pts)
    st["max_watts"] = watts
    return loss(st, p, watts), st, pts


def fit(base_pts: dict, workloads, factor, pool, rounds: int = 2, log=print) -> tuple[Params, list]:
    """Coordinate search over :data:`GRID` from the prior: each parameter in turn takes the grid value that
    lowers the loss most, the others held; ``rounds`` passes. Returns the best parameters and the trace."""
    cache: dict[Params, tuple[float, dict]] = {}

    def f(p: Params) -> float:
        if p not in cache:
            val, st, _ = evaluate(p, base_pts, workloads, FIT_CONCS, factor, pool)
            cache[p] = (val, st)
        return cache[p][0]

    best = PRIOR
    log(f"  prior {best}: loss {f(best):.3f} {fmt_stats(cache[best][1])}")
    for r in range(rounds):
        moved = False
        for name, vals in GRID.items():
            cands = [replace(best, **{name: v}) for v in vals]
            scores = [f(c) for c in cands]
            i = int(np.argmin(scores))
            if scores[i] < f(best) - 1e-9:
                best, moved = cands[i], True
                log(f"  round {r + 1}: {name} = {vals[i]:g}: loss {scores[i]:.3f} {fmt_stats(cache[best][1])}")
        if not moved:
            break
    trace = [(p, v, st) for p, (v, st) in cache.items()]
    return best, trace


def fmt_stats(st: dict) -> str:
    return (f"[tok/W {st['tokens_per_w']:.2f}, E2E {st['e2e']:.2f}, interactive {st['interactive']:.2f}, "
            f"max {st.get('max_watts', float('nan')):.0f} W]")
