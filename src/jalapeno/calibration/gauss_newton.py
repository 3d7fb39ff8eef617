"""A fit that converges in seconds: Gauss–Newton over linearised simulations.

Each outer iteration simulates every fit point once at the current parameters (:func:`.linearise.linearise`:
metrics and their gradients), then solves the robust least squares on that surrogate (bounded, soft-L1 on
weighted ln(predicted / measured), analytic Jacobian: milliseconds), and moves there. It stops when no
parameter moves by more than ``tol`` (1%) of its scale (its value, or 1% of its range near zero), when the
simulated cost improved by less than 0.1% in the last step (a plateau), or after ``max_iter`` simulations of the set; a step that made the simulated cost worse is halved (backtracking).
The result is the simulated iterate with the lowest cost, so every reported number comes from full simulations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from jalapeno.calibration.linearise import SURROGATE_METRICS, Linearisation, linearise
from jalapeno.calibration.points import Point, SimSpec
from jalapeno.hardware.schema import Efficiency

#: soft-L1 scale on ln(pred / meas): errors beyond ~10% count linearly, not quadratically
SOFT_L1_SCALE = 0.1
#: damping of the surrogate step (weight on the move in unit coordinates): a light trust region
DAMPING = 1e-3
#: a parameter has converged when it moves less than this fraction of its scale
TOL = 0.01
#: ... or the simulated cost improved by less than this fraction in the last step (a plateau: the surrogate's
#: step is within the simulator's own noise, e.g. median TTFT under a changed schedule)
COST_RTOL = 1e-3

Item = tuple[Point, SimSpec]


@dataclass(frozen=True)
class Spec:
    """What the loop fits: parameter ``names`` with ``bounds``, metric ``weights``, and how a point's efficiency
    and request latency follow from parameter values (``efficiency(spec, values)``, ``latency(values)``:
    framework key -> ms)."""

    names: tuple[str, ...]
    bounds: tuple[tuple[float, float], ...]
    weights: dict[str, float]
    efficiency: Callable[[SimSpec, dict[str, float]], Efficiency]
    latency: Callable[[dict[str, float]], dict[str, float]]


@dataclass
class Iteration:
    values: dict[str, float]
    cost: float  # soft-L1 cost of the simulated residuals
    median_abs_log: float  # median |ln(pred / meas)| over (point, metric)
    failed: int
    move: float = math.nan  # largest relative move of the step taken from here


@dataclass
class GNResult:
    values: dict[str, float]
    iterations: list[Iteration] = field(default_factory=list)
    converged: bool = False
    simulations: int = 0
    stop: str = "max_iter"  # why it stopped: "moves < tol", "cost plateau", "max_iter", "no usable points"


def _rows(items: Sequence[Item], lins: Sequence[Linearisation], weights: dict[str, float]):
    """(constant ln errors c, relative gradients A, signs s, weights w) of every usable (point, metric)."""
    c, a, s, w = [], [], [], []
    p = None
    for (pt, _), lin in zip(items, lins):
        if lin.error:
            continue
        for m, wt in weights.items():
            meas = pt.metrics.get(m)
            v = lin.values.get(m)
            if not wt or not meas or meas <= 0 or not v or v <= 0:
                continue
            g = lin.rel.get(m)
            if g is None:
                continue
            p = len(g)
            c.append(math.log(v / meas))
            a.append(g)
            s.append(SURROGATE_METRICS[m])
            w.append(wt)
    if p is None:
        return None
    return np.array(c), np.array(a), np.array(s, dtype=float), np.array(w)


def _soft_l1(r: np.ndarray) -> float:
    z = (r / SOFT_L1_SCALE) ** 2
    return float(0.5 * SOFT_L1_SCALE ** 2 * np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0)))


def solve_surrogate(rows, theta: np.ndarray, bounds: Sequence[tuple[float, float]]) -> np.ndarray:
    """The bounded robust least-squares minimiser of the linearised residuals around ``theta``."""
    from scipy.optimize import least_squares

    c, a, s, w = rows
    lo = np.array([b[0] for b in bounds])
    hi = np.array([b[1] for b in bounds])
    span = hi - lo
    u0 = np.clip((theta - lo) / span, 0.0, 1.0)
    damp = math.sqrt(DAMPING)

    def inner(u: np.ndarray) -> np.ndarray:
        return 1.0 + a @ (lo + u * span - theta)

    def fun(u: np.ndarray) -> np.ndarray:
        q = np.maximum(inner(u), 1e-3)
        return np.concatenate((w * (c + s * np.log(q)), damp * (u - u0)))

    def jac(u: np.ndarray) -> np.ndarray:
        q = inner(u)
        f = np.where(q > 1e-3, 1.0 / np.maximum(q, 1e-3), 0.0)
        j = (w * s * f)[:, None] * a * span[None, :]
        return np.vstack((j, damp * np.eye(len(u))))

    r = least_squares(fun, u0, jac=jac, bounds=(0.0, 1.0), loss="soft_l1", f_scale=SOFT_L1_SCALE,
                      x_scale="jac", xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=200)
    return lo + r.x * span


def _move(new: np.ndarray, old: np.ndarray, bounds) -> float:
    scale = np.array([max(abs(o), 0.01 * (hi - lo)) for o, (lo, hi) in zip(old, bounds)])
    return float(np.max(np.abs(new - old) / scale)) if len(old) else 0.0


def gauss_newton(items: Sequence[Item], spec: Spec, start: dict[str, float], *,
                 prompts: int | None | Callable[[SimSpec], int | None],
                 mapper: Callable[[Callable, list, str], list], max_iter: int = 4, tol: float = TOL) -> GNResult:
    """Fit ``spec.names`` on ``items`` from ``start`` (see module doc). ``mapper(fn, args, label)`` runs
    ``fn(*args[i])`` for every i (a process pool) and returns the results in order. ``prompts``: requests per
    unit of concurrency (None: the point's own), or a function of the point giving it."""
    names = spec.names
    theta = np.array([start[n] for n in names], dtype=float)
    out = GNResult(dict(start))
    best: tuple[float, np.ndarray] | None = None
    for it in range(max_iter):
        vals = dict(zip(names, theta.tolist()))
        lat = spec.latency(vals)
        args = [(s, spec.efficiency(s, vals), names, spec.bounds, lat, prompts(s) if callable(prompts) else prompts)
                for _, s in items]
        lins: list[Linearisation] = mapper(linearise, args, f"Gauss-Newton iteration {it + 1}")
        out.simulations += len(items)
        rows = _rows(items, lins, spec.weights)
        failed = sum(1 for lin in lins if lin.error)
        if rows is None:
            out.stop = "no usable points"
            break
        r0 = rows[3] * rows[0]
        cost = _soft_l1(r0) + failed * _soft_l1(np.array([3.0]))
        step = Iteration(vals, cost, float(np.median(np.abs(r0))), failed)
        out.iterations.append(step)
        if best is not None and cost > best[0]:  # the step made things worse: halve it, from the best point
            theta = best[1] + 0.5 * (theta - best[1])
            step.move = _move(theta, best[1], spec.bounds)
            continue
        plateau = best is not None and cost > best[0] * (1.0 - COST_RTOL)
        best = (cost, theta.copy())
        if plateau:
            out.converged, out.stop = True, "cost plateau"
            break
        new = solve_surrogate(rows, theta, spec.bounds)
        step.move = _move(new, theta, spec.bounds)
        if step.move < tol:
            out.converged, out.stop = True, "moves < tol"
            break
        theta = new
    if best is not None:
        out.values = dict(zip(names, best[1].tolist()))
    return out


__all__ = ["GNResult", "Iteration", "Spec", "gauss_newton", "solve_surrogate"]
