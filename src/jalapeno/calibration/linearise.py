"""Linearised serving predictions: one simulation of a point gives its metrics *and* their gradients in the
fitted parameters, so a fit solves on a surrogate in milliseconds (the Gauss–Newton loop in :mod:`.gauss_newton`).

Why it works: every overhead term is affine in a step's features (``perf.model.overhead_vector``), so with the
schedule held (the same batches in the same order) each step's duration is affine in the overhead parameters,
and so is every event time on the virtual clock. :class:`TangentBackend` is the simulator's ``SimBackend`` that
also records, for every step it prices, d(step duration)/d(parameter) — the overhead feature rows
(:meth:`~jalapeno.perf.CostModel.fixed_time_gradient`, exact), or for a parameter that changes the roofline
(``compute.fp8``, ``scale_up``, ...) a forward difference of the step time under a bumped cost model. Summed
along the clock these give d(time)/d(parameter) at any instant, and per request:

* TTFT = front-end delay + (first token − arrival at the engine): gradient Φ(first) − Φ(arrival) + d(delay);
* TPOT = (finish − first token) / (output − 1): gradient (Φ(finish) − Φ(first)) / (output − 1);
* output throughput (closed loop, Little's law: in-flight requests / mean end-to-end latency): scales as
  E2E₀ / E2E(θ), E2E's gradient Φ(finish) − Φ(arrival) + d(delay) averaged over requests.

A median's gradient is the mean gradient of the requests between the 40th and 60th percentile of that metric.
The schedule does move with the parameters (batches form differently), which is why the fit re-simulates at
each solution and re-linearises (Gauss–Newton); the linearisation is exact for the step-time part at the
current schedule. Disaggregated points are not linearised (they keep a fixed residual in the surrogate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Sequence

import numpy as np

from jalapeno.calibration.points import SimSpec
from jalapeno.hardware.schema import Efficiency
from jalapeno.perf.ops import NF
from jalapeno.sim.backend import SimBackend

#: metrics the surrogate predicts; +1: affine in the parameters, -1: inverse (throughputs, via mean E2E)
SURROGATE_METRICS = {"median_ttft": 1, "median_tpot": 1, "output_tput_per_gpu": -1, "total_tput_per_gpu": -1}
#: the requests whose gradients stand for a median: this band of percentiles
MEDIAN_BAND = (40.0, 60.0)
#: latency parameters: they delay a request before the engine (not step time)
LATENCY_FIELDS = ("request_overhead_ms", "request_overhead_us_per_token")


def _is_latency(name: str) -> bool:
    return "@" in name or name in LATENCY_FIELDS


def _fd_step(name: str, value: float, lower: float, upper: float) -> float:
    """Forward-difference step of a roofline parameter: 1% of its range, towards the interior."""
    h = 0.01 * (upper - lower) if math.isfinite(upper) else max(abs(value), 1.0) * 0.01
    return h if value + h <= upper else -h


@dataclass(frozen=True)
class Direction:
    """How one parameter moves a step's duration: ``row`` (coefficients over the features: exact) or a bumped
    cost model ``cm`` and its step ``h`` (forward difference); neither for a latency parameter."""

    row: np.ndarray | None = None
    cm: object | None = None
    h: float = 0.0


def directions(cm, names: Sequence[str], bounds: Sequence[tuple[float, float]]) -> list[Direction]:
    """One :class:`Direction` per parameter for the cost model ``cm`` (its efficiency is the point)."""
    from jalapeno.calibration.fit import apply_params, current_value, param
    from jalapeno.perf import CostModel

    out = []
    for name, (lo, hi) in zip(names, bounds):
        if _is_latency(name):
            out.append(Direction())
            continue
        row = cm.fixed_time_gradient(name)
        if row is not None:
            out.append(Direction(row=row))
            continue
        v = current_value(param(name, cm.eff), cm.eff)
        h = _fd_step(name, v, lo, hi)
        bumped = CostModel(cm.model, cm.chip, cm.parallel, cm.precision,
                           efficiency=apply_params(cm.eff, {name: v + h}), sram_pinning=cm.sram_pinning,
                           memory_rule=cm.memory_rule)
        out.append(Direction(cm=bumped, h=h))
    return out


class _Recorder:
    """The cost model, seen through: each ``step`` / ``decode_steps`` call also records the per-step duration
    gradients (``calls``: (steps, gradient row per step, per-step array of the finite-difference part))."""

    def __init__(self, cm, dirs: list[Direction]):
        self._cm = cm
        self._lin = np.array([d.row if d.row is not None else np.zeros(NF) for d in dirs])
        self._fd = [(i, d) for i, d in enumerate(dirs) if d.cm is not None]
        self.calls: list[tuple[int, np.ndarray, np.ndarray | None]] = []
        self.on = True

    def __getattr__(self, name):
        return getattr(self._cm, name)

    def step(self, shape):
        c = self._cm.step(shape)
        if self.on:
            row = self._lin @ self._cm.features(shape) if (shape.prefill_tokens or shape.decode_tokens) \
                else np.zeros(len(self._lin))
            if shape.prefill_tokens and c.time_s <= getattr(self._cm, "prefill_host_s", 0.0):
                row = np.zeros(len(self._lin))  # a host-bound prefill step: the device terms do not move it
            for i, d in self._fd:
                row[i] = (d.cm.step(shape).time_s - c.time_s) / d.h
            self.calls.append((1, row, None))
        return c

    def decode_steps(self, shape, k: int):
        t, e = self._cm.decode_steps(shape, k)
        if self.on and k > 0:
            if not shape.decode_tokens:
                self.calls.append((k, np.zeros(len(self._lin)), None))
                return t, e
            row = self._lin @ self._cm.features(shape)  # the fixed-time rows have no context terms: per step
            fd = None
            if self._fd:
                fd = np.zeros((k, len(self._lin)))
                for i, d in self._fd:
                    fd[:, i] = (d.cm.decode_steps(shape, k)[0] - t) / d.h
            self.calls.append((k, row, fd))
        return t, e


class TangentBackend(SimBackend):
    """:class:`SimBackend` that prices exactly as it does and records, per priced stretch of steps, its time
    span on the engine's clock and the summed duration gradient (``segments``)."""

    def __init__(self, cost_model, *args, names: Sequence[str] = (), bounds: Sequence[tuple[float, float]] = (),
                 **kw):
        super().__init__(cost_model, *args, **kw)
        self.cm = _Recorder(cost_model, directions(cost_model, names, bounds))
        self.segments: list[tuple[float, float, np.ndarray]] = []
        self._clock = None

    def attach_clock(self, clock) -> None:
        self._clock = clock

    def _proposer(self, shape, steps):
        self.cm.on = False  # a draft's passes are not the target's steps (MTP points: not linearised exactly)
        try:
            return super()._proposer(shape, steps)
        finally:
            self.cm.on = True

    def execute(self, batch):
        self.cm.calls.clear()
        res = super().execute(batch)
        durs = list(res.step_durations or (res.duration_s,))
        t = self._clock.now() if self._clock is not None else batch.start_s
        pos = 0
        for k, row, fd in self.cm.calls:
            n = min(k, len(durs) - pos)
            if n <= 0:
                break
            span = float(sum(durs[pos:pos + n]))
            d = n * row + (fd[:n].sum(axis=0) if fd is not None else 0.0)
            self.segments.append((t, t + span, d))
            t += span
            pos += n
        return res


class _Timeline:
    """Φ(t): the cumulative duration gradient at time ``t`` (linear inside a recorded stretch, flat in gaps)."""

    def __init__(self, segments: list[tuple[float, float, np.ndarray]], p: int):
        self.t0 = np.array([s[0] for s in segments]) if segments else np.zeros(0)
        self.t1 = np.array([s[1] for s in segments]) if segments else np.zeros(0)
        d = np.array([s[2] for s in segments]).reshape(len(segments), p)
        self.d = d
        self.before = np.vstack([np.zeros((1, p)), np.cumsum(d, axis=0)])  # Φ at each segment's start

    def at(self, t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.t1, t, side="left")  # the first stretch ending at or after t
        i = np.minimum(i, len(self.t1))
        out = self.before[i].copy()
        inside = i < len(self.t1)
        j = i[inside]
        span = np.maximum(self.t1[j] - self.t0[j], 1e-300)
        frac = np.clip((t[inside] - self.t0[j]) / span, 0.0, 1.0)
        out[inside] += frac[:, None] * self.d[j]
        return out


@dataclass
class Linearisation:
    """One point at one parameter vector: predicted metrics (SI) and, per metric, the sign (+1 affine, -1 inverse)
    and the relative gradient ``a`` such that metric(θ) ≈ value · (1 + a·(θ − θ₀))^sign."""

    values: dict[str, float]
    rel: dict[str, np.ndarray] = field(default_factory=dict)
    error: str | None = None

    def predict(self, dtheta: np.ndarray) -> dict[str, float]:
        out = {}
        for m, v in self.values.items():
            a = self.rel.get(m)
            if a is None:
                out[m] = v
                continue
            out[m] = v * max(1e-3, 1.0 + float(a @ dtheta)) ** SURROGATE_METRICS[m]
        return out


def _band_mean(values: np.ndarray, grads: np.ndarray) -> np.ndarray:
    lo, hi = np.percentile(values, MEDIAN_BAND)
    sel = (values >= lo) & (values <= hi)
    if not sel.any():
        sel = np.argsort(values)[len(values) // 2: len(values) // 2 + 1]
    return grads[sel].mean(axis=0)


def _delay_gradient(names: Sequence[str], profile: str | None, prompts: np.ndarray) -> np.ndarray:
    """d(front-end delay)/d(parameter) (s per unit) for each request: ``request_overhead_ms@fw`` moves the
    requests of that framework profile, ``request_overhead_ms`` those without one (frameworks off: all)."""
    from jalapeno.errors import ConfigError
    from jalapeno.perf.frameworks import get_framework

    g = np.zeros((len(prompts), len(names)))
    for i, n in enumerate(names):
        if "@" in n:
            try:
                key = get_framework(n.split("@", 1)[1]).key
            except ConfigError:
                key = n.split("@", 1)[1]
            if profile == key:
                g[:, i] = 1e-3
        elif n == "request_overhead_ms" and profile is None:
            g[:, i] = 1e-3
        elif n == "request_overhead_us_per_token":
            g[:, i] = 1e-6 * prompts
    return g


def linearise(spec: SimSpec, eff: Efficiency, names: Sequence[str], bounds: Sequence[tuple[float, float]],
              latency_ms: dict[str, float], prompts: int | None, seed: int = 0) -> Linearisation:
    """Simulate ``spec`` under ``eff`` (``latency_ms``: framework key -> request latency override) and linearise
    its metrics in the parameters ``names``. A point that cannot run comes back with ``error``."""
    from jalapeno.calibration.predict import framework_profile, run_point

    if spec.disagg is not None:
        return Linearisation({}, error="disaggregated points are not linearised")
    profile = framework_profile(spec)
    try:
        run = run_point(spec, eff, seed=seed, prompts_per_concurrency=prompts,
                        request_overhead_ms=latency_ms.get(profile) if profile else latency_ms.get("*"),
                        backend_cls=partial(TangentBackend, names=tuple(names), bounds=tuple(bounds)))
    except Exception as exc:  # noqa: BLE001 - a point that cannot run is charged, not fatal
        return Linearisation({}, error=f"{type(exc).__name__}: {exc}")
    values = {m: v for m, v in run.predicted.items() if m in SURROGATE_METRICS}
    ok = [o for o in run.result.outcomes if o.success]
    if not ok:
        return Linearisation(values)
    be: TangentBackend = run.engine.backend
    p = len(names)
    tl = _Timeline(be.segments, p)
    send = np.array([o.start_s for o in ok])
    prompt = np.array([o.prompt_tokens for o in ok], dtype=float)
    arrive = send + be.request_latency_s + be.request_latency_per_token_s * prompt  # as the client delays them
    first = send + np.array([o.ttft_s for o in ok])
    finish = send + np.array([o.e2el_s for o in ok])
    dd = _delay_gradient(names, profile, prompt)
    f_arr, f_first, f_fin = tl.at(arrive), tl.at(first), tl.at(finish)
    g_ttft = f_first - f_arr + dd
    g_e2e = f_fin - f_arr + dd
    rel: dict[str, np.ndarray] = {}
    if "median_ttft" in values and values["median_ttft"] > 0:
        rel["median_ttft"] = _band_mean(first - send, g_ttft) / values["median_ttft"]
    out_tok = np.array([o.output_tokens for o in ok], dtype=float)
    multi = out_tok > 1
    if "median_tpot" in values and values["median_tpot"] > 0 and multi.any():
        tpot = (finish - first)[multi] / (out_tok[multi] - 1)
        g_tpot = (f_fin - f_first)[multi] / (out_tok[multi] - 1)[:, None]
        rel["median_tpot"] = _band_mean(tpot, g_tpot) / values["median_tpot"]
    e2e0 = float(np.mean(finish - send))
    for m in ("output_tput_per_gpu", "total_tput_per_gpu"):
        if m in values and e2e0 > 0:
            rel[m] = g_e2e.mean(axis=0) / e2e0
    return Linearisation(values, rel)


__all__ = ["Linearisation", "TangentBackend", "directions", "linearise", "SURROGATE_METRICS"]
