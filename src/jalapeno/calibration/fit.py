"""Fit a chip's named efficiency parameters (and serving-framework request latencies) to measured points.

The library behind ``jalapeno calibrate`` and ``benchmarks/fidelity.py``:

* :func:`prepare` turns points into (point, :class:`SimSpec`) items, counting why others are not predicted;
* :func:`split_items` splits them into a fit and a held-out set (by date, by chip, or randomly by
  configuration), :func:`dedupe` makes each configuration one point (measured values: median over reruns);
* :func:`fit` fits the named parameters by Gauss-Newton over linearised simulations
  (:mod:`jalapeno.calibration.gauss_newton`, :mod:`jalapeno.calibration.linearise`: bounded, soft-L1 loss on
  ln(predicted / measured), one simulation of every search point per iteration), then error tables before and
  after on both sets.

Every prediction is a full serving simulation (engine + ``SimBackend`` + cost model, in a process pool), with
``search_prompts`` x concurrency requests per point during the search and ``final_prompts`` (InferenceX: 10)
for the final tables. Deterministic: fixed workload seeds, a fixed random split seed, no randomness in the
optimiser. Parameters are named (``step_overhead_us``, ``compute.fp8``, ``request_overhead_ms@sglang``, ...):
any numeric field of :class:`~jalapeno.hardware.schema.Efficiency` (see :func:`parameter_names`).
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence

import numpy as np

from jalapeno.calibration.points import Excluded, Point, SimSpec, config_key, to_sim_spec
from jalapeno.calibration.stats import ErrorSummary, summarize
from jalapeno.errors import CalibrationError
from jalapeno.hardware.schema import Efficiency

#: metrics the efficiency stage fits (log errors, equal weight) and the latency stage fits
EFFICIENCY_METRICS = ("output_tput_per_gpu", "median_tpot")
LATENCY_METRICS = ("median_ttft",)
#: metrics of the before/after tables
TABLE_METRICS = ("output_tput_per_gpu", "total_tput_per_gpu", "median_tpot", "median_ttft")
#: soft-L1 scale on ln(pred / meas): errors beyond ~10% count linearly, not quadratically
SOFT_L1_SCALE = 0.1
#: points needed per fitted parameter
POINTS_PER_PARAM = 3
#: ln error charged to a metric of a point the simulator cannot run (e.g. the model stops fitting)
FAILED_RESIDUAL = 3.0
#: the default parameter set: the fixed costs per step and per layer and the collective efficiency
DEFAULT_PARAMS = ("step_overhead_us", "layer_overhead_us", "scale_up")

#: per-framework latency parameters (``<field>@<framework>``) and their upper bounds in ms: the front-end
#: request latency, and a disaggregated stack's per-request prefill -> decode handoff
LATENCY_FIELDS = {"request_overhead_ms": 500.0, "kv_handoff_ms": 5000.0}
#: evaluations of the one-dimensional search of a handoff latency (a bounded Brent search: twice as many steps)
HANDOFF_NFEV = 12

Item = tuple[Point, SimSpec]
Progress = Callable[[str, int, int], None]  # (stage description, done, total)


# ------------------------------------------------------------------------------------------------ parameters
@dataclass(frozen=True)
class Param:
    """One named, bounded parameter. ``framework`` set: that serving framework's request latency (ms)."""

    name: str
    lower: float
    upper: float
    framework: str | None = None

    @property
    def is_latency(self) -> bool:
        return self.framework is not None or self.name == "request_overhead_ms"

    @property
    def field(self) -> str:
        """The quantity: ``request_overhead_ms``, ``kv_handoff_ms`` or an efficiency field."""
        return self.name.split("@", 1)[0]


def _scalar_fields() -> dict[str, tuple[float, float]]:
    """Numeric scalar fields of :class:`Efficiency` and their bounds (from the schema's constraints)."""
    out: dict[str, tuple[float, float]] = {}
    for name, f in Efficiency.model_fields.items():
        if f.annotation not in (float, int):
            continue
        lo, hi = 0.0, math.inf
        for m in f.metadata:
            lo = max(lo, float(getattr(m, "ge", None) or getattr(m, "gt", None) or 0.0))
            if getattr(m, "le", None) is not None:
                hi = float(m.le)
        if math.isinf(hi):
            hi = 1000.0 if name.endswith("_us") else 500.0 if name.endswith("_ms") else 100.0
        out[name] = (max(lo, 0.05) if hi <= 1 else lo, hi)
    return out


def parameter_names(base: Efficiency) -> list[str]:
    """Every parameter name :func:`param` accepts for ``base`` (per-framework latencies not listed)."""
    names = list(_scalar_fields())
    names += [f"compute.{k}" for k in base.compute] + [f"memory.{k}" for k in base.memory]
    return names


def param(name: str, base: Efficiency) -> Param:
    """The :class:`Param` named ``name``: a scalar efficiency field, ``compute.<dtype>``, ``memory.<level>`` or
    ``request_overhead_ms@<framework>``. Unknown names raise :class:`CalibrationError`."""
    n = name.strip()
    if "@" in n:
        field_, fw = n.split("@", 1)
        if field_ not in LATENCY_FIELDS or not fw:
            raise CalibrationError(f"unknown parameter {name!r}: per-framework parameters are "
                                   "request_overhead_ms@<framework> (e.g. request_overhead_ms@sglang) or "
                                   "kv_handoff_ms@<disaggregated stack> (e.g. kv_handoff_ms@dynamo-trt)")
        return Param(n, 0.0, LATENCY_FIELDS[field_], fw)
    scalars = _scalar_fields()
    if n in scalars:
        return Param(n, *scalars[n])
    group, _, key = n.partition(".")
    if group in ("compute", "memory") and key:
        return Param(n, 0.05, 1.0)
    raise CalibrationError(f"unknown parameter {name!r}: use one of {', '.join(parameter_names(base))} "
                           "or request_overhead_ms@<framework>")


def current_value(p: Param, base: Efficiency) -> float:
    """``p``'s value in ``base`` (a latency parameter of a framework: its profile's value, else the chip's)."""
    if p.framework is not None:
        from jalapeno.errors import ConfigError
        from jalapeno.perf.frameworks import get_framework

        try:
            fw = get_framework(p.framework)
        except ConfigError:
            return 0.0 if p.field == "kv_handoff_ms" else base.request_overhead_ms
        if p.field == "kv_handoff_ms":
            return fw.kv_handoff_ms
        return base.framework_overhead_ms.get(fw.key, fw.request_overhead_ms)  # the chip family's own, if fitted
    group, _, key = p.name.partition(".")
    if group == "compute" and key:
        return base.compute.get(key, base.compute_default)
    if group == "memory" and key:
        return base.memory.get(key, base.memory_default)
    return float(getattr(base, p.name))


def apply_params(base: Efficiency, values: dict[str, float]) -> Efficiency:
    """``base`` with the named efficiency values set (``compute.bf16`` sets ``fp16`` too); latency parameters of
    frameworks are ignored here (they go to the predictor per point)."""
    upd: dict = {}
    compute, memory = dict(base.compute), dict(base.memory)
    for k, v in values.items():
        if "@" in k:
            continue
        group, _, key = k.partition(".")
        if group == "compute" and key:
            compute[key] = float(v)
            if key == "bf16":
                compute["fp16"] = float(v)
        elif group == "memory" and key:
            memory[key] = float(v)
        else:
            upd[k] = float(v)
    return base.model_copy(update={**upd, "compute": compute, "memory": memory})


# ------------------------------------------------------------------------------------------------ data
@dataclass
class Prepared:
    """Points that can be predicted, and how many of the others were left out, by reason."""

    items: list[Item]
    excluded: dict[str, int] = field(default_factory=dict)


def prepare(points: Iterable[Point], *, chips: Sequence[str] | None = None) -> Prepared:
    """(point, spec) for every point the simulator predicts (optionally only on ``chips``); the rest counted by
    reason (unmapped model/chip, disaggregated not yet simulated, ...)."""
    out = Prepared([])
    ex: dict[str, int] = defaultdict(int)
    for p in points:
        s = to_sim_spec(p)
        reason = s.reason if isinstance(s, Excluded) else s.not_simulated
        if reason is None and chips and s.chip not in chips:  # type: ignore[union-attr]
            continue
        if reason is not None:
            ex[reason] += 1
            continue
        out.items.append((p, s))  # type: ignore[arg-type]
    out.excluded = dict(ex)
    return out


def dedupe(items: Sequence[Item]) -> list[Item]:
    """One point per configuration (:func:`config_key`): measured metrics = median over its reruns."""
    groups: dict[tuple, list[Item]] = defaultdict(list)
    for p, s in items:
        groups[config_key(s)].append((p, s))
    out = []
    for g in groups.values():
        p0, s0 = g[0]
        names = sorted({m for p, _ in g for m in p.metrics})
        metrics = {m: float(np.median([p.metrics[m] for p, _ in g if m in p.metrics])) for m in names}
        out.append((Point(p0.source, p0.key, tuple(i for p, _ in g for i in p.ids), metrics), s0))
    return out


def split_items(items: Sequence[Item], split: str = "date:2026-01", seed: int = 0) -> tuple[list[Item], list[Item]]:
    """(fit, held-out). ``date:YYYY-MM``: points dated from that month on are held out; ``chip:a,b``: those chips'
    points are held out; ``random:F``: a fraction F of the configurations (seeded) is held out."""
    kind, _, arg = split.partition(":")
    if kind == "date" and arg:
        held = [it for it in items if it[0].col("date")[:len(arg)] >= arg]
    elif kind == "chip" and arg:
        names = {c.strip().lower() for c in arg.split(",")}
        held = [it for it in items if it[1].chip in names]
    elif kind == "random":
        try:
            frac = float(arg)
        except ValueError:
            frac = -1.0
        if not 0 < frac < 1:
            raise CalibrationError(f"--split random:F needs a fraction 0 < F < 1 (got {split!r})")
        keys = sorted({repr(config_key(s)) for _, s in items})
        random.Random(seed).shuffle(keys)
        out = set(keys[:round(frac * len(keys))])
        held = [it for it in items if repr(config_key(it[1])) in out]
    else:
        raise CalibrationError(f"unknown split {split!r}: use date:YYYY-MM, chip:NAME[,NAME] or random:F")
    ids = {id(it) for it in held}
    return [it for it in items if id(it) not in ids], list(held)


# ------------------------------------------------------------------------------------------------ prediction
@dataclass(frozen=True)
class Job:
    spec: SimSpec
    efficiency: Efficiency
    prompts: int | None
    request_overhead_ms: float | None = None
    frameworks: bool = True
    kv_handoff_ms: float | None = None


def run_job(job: Job) -> dict[str, float | str]:
    """One prediction (metrics in SI units), or ``{"error": ...}`` when the simulator cannot run it."""
    from jalapeno.calibration.predict import simulate

    try:
        return simulate(job.spec, job.efficiency, prompts_per_concurrency=job.prompts,
                        frameworks=job.frameworks, request_overhead_ms=job.request_overhead_ms,
                        kv_handoff_ms=job.kv_handoff_ms)
    except Exception as exc:  # noqa: BLE001 - a point that cannot run is charged, not fatal
        return {"error": f"{type(exc).__name__}: {exc}"}


def _cost_guess(s: SimSpec) -> float:
    return (s.concurrency or 1000) * (s.osl + s.isl / 8)


class Predictor:
    """Runs jobs in a process pool of ``workers`` (in-process when 1), long jobs first, reporting progress."""

    def __init__(self, workers: int = 2, progress: Progress | None = None):
        self.workers = workers
        self.progress = progress
        self._pool: ProcessPoolExecutor | None = None
        self.runs = 0

    def __enter__(self) -> "Predictor":
        if self.workers > 1:
            self._pool = ProcessPoolExecutor(self.workers)
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def run(self, jobs: Sequence[Job], label: str = "simulating") -> list[dict]:
        return self.map(run_job, [(j,) for j in jobs], label)

    def map(self, fn: Callable, args: Sequence[tuple], label: str = "simulating") -> list:
        """``fn(*a)`` for every ``a`` in ``args`` (its first element a job or a spec: long ones first), in order."""
        def spec_of(a: tuple) -> SimSpec:
            return a[0].spec if isinstance(a[0], Job) else a[0]

        order = sorted(range(len(args)), key=lambda i: -_cost_guess(spec_of(args[i])))
        todo = [args[i] for i in order]
        results = (fn(*a) for a in todo) if self._pool is None else \
            self._pool.map(_star, [(fn, a) for a in todo], chunksize=1)
        out: list = [None] * len(args)
        for n, (i, r) in enumerate(zip(order, results), 1):
            out[i] = r
            if self.progress:
                self.progress(label, n, len(args))
        self.runs += len(args)
        return out


def _star(fa: tuple) -> object:
    fn, a = fa
    return fn(*a)


def log_residuals(items: Sequence[Item], preds: Sequence[dict], metrics: Sequence[str]) -> np.ndarray:
    """ln(pred / meas) for every (point, metric) measured; :data:`FAILED_RESIDUAL` where the prediction failed."""
    res = []
    for (p, _), pr in zip(items, preds):
        for m in metrics:
            v = p.metrics.get(m)
            if v is None or v <= 0:
                continue
            got = pr.get(m)
            res.append(math.log(got / v) if isinstance(got, float) and got > 0 else FAILED_RESIDUAL)
    return np.asarray(res, dtype=float)


def error_table(items: Sequence[Item], preds: Sequence[dict],
                metrics: Sequence[str] = TABLE_METRICS) -> dict[str, ErrorSummary]:
    """Per metric: median / p90 |%| and signed median % over the points that predicted."""
    out = {}
    for m in metrics:
        errs = [100.0 * (pr[m] - p.metrics[m]) / p.metrics[m] for (p, _), pr in zip(items, preds)
                if p.metrics.get(m) and isinstance(pr.get(m), float)]
        out[m] = summarize(errs)
    return out


# ------------------------------------------------------------------------------------------------ fitting
@dataclass
class FitReport:
    """What a fit did: parameters before/after, the data, and the error tables."""

    chip: str
    params: list[Param]
    start: dict[str, float]
    fitted: dict[str, float]
    n_fit: int
    n_held: int
    tables: dict[str, dict[str, ErrorSummary]]  # "before fit", "after fit", "before held-out", "after held-out"
    simulations: int
    wall_s: float
    excluded: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    n_search: int = 0  # configurations the search ran on (a subsample of the fit set when capped)
    iterations: list = field(default_factory=list)  # Gauss-Newton iterates: values, cost, median |ln|, move
    converged: bool = False  # the last step moved every parameter by less than 1%, or the cost plateaued
    stop: str = ""  # why the search stopped (gauss_newton.GNResult.stop)

    def held_out_median(self, metric: str = "output_tput_per_gpu") -> float | None:
        s = self.tables.get("after held-out", {}).get(metric)
        return None if s is None or not s.n else s.median_abs

    def to_json(self) -> dict:
        return {
            "chip": self.chip, "start": self.start, "fitted": self.fitted, "n_fit": self.n_fit,
            "n_held": self.n_held, "n_search": self.n_search, "simulations": self.simulations,
            "converged": self.converged, "stop": self.stop, "iterations": self.iterations, "wall_s": round(self.wall_s, 1),
            "bounds": {p.name: [p.lower, p.upper] for p in self.params},
            "tables": {k: {m: {"n": s.n, "median_abs_pct": _num(s.median_abs), "p90_abs_pct": _num(s.p90_abs),
                               "median_signed_pct": _num(s.median_signed)} for m, s in t.items()}
                       for k, t in self.tables.items()},
            "excluded": self.excluded, "failures": self.failures[:20],
        }


def _num(x: float) -> float | None:
    return None if x != x else round(x, 2)


def _check_enough(n_points: int, params: Sequence[Param], what: str) -> None:
    if params and n_points < POINTS_PER_PARAM * len(params):
        raise CalibrationError(
            f"{what}: {n_points} points for {len(params)} parameter(s) ({', '.join(p.name for p in params)}); "
            f"need at least {POINTS_PER_PARAM}·P = {POINTS_PER_PARAM * len(params)}: add measurements or fit "
            "fewer parameters (--params)")


def _least_squares(fun: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, params: Sequence[Param],
                   max_nfev: int) -> np.ndarray:
    """Bounded soft-L1 least squares in unit coordinates (each parameter scaled to its bounds). One parameter:
    bounded Brent search on the same soft-L1 cost (forward differences are unreliable where a prediction moves
    in small steps, e.g. MTP acceptance drawn per token)."""
    from scipy.optimize import least_squares

    lo = np.array([p.lower for p in params])
    hi = np.array([p.upper for p in params])
    u0 = np.clip((x0 - lo) / (hi - lo), 0.0, 1.0)
    cache: dict[tuple, np.ndarray] = {}

    def f(u: np.ndarray) -> np.ndarray:
        key = tuple(np.round(u, 6))
        if key not in cache:
            cache[key] = fun(lo + u * (hi - lo))
        return cache[key]

    if len(params) == 1:  # one parameter: a bracketing search, robust to the simulator's small steps
        from scipy.optimize import minimize_scalar

        def cost(u: float) -> float:
            z = (f(np.array([u])) / SOFT_L1_SCALE) ** 2
            return float(np.sum(np.sqrt(1.0 + z) - 1.0))

        r1 = minimize_scalar(cost, bounds=(0.0, 1.0), method="bounded",
                             options={"xatol": 1e-3, "maxiter": 2 * max_nfev})
        return lo + np.array([r1.x]) * (hi - lo)
    r = least_squares(f, u0, bounds=(0.0, 1.0), loss="soft_l1", f_scale=SOFT_L1_SCALE, diff_step=0.02,
                      x_scale=1.0, max_nfev=max_nfev, xtol=1e-3, ftol=1e-4, gtol=1e-6)
    return lo + r.x * (hi - lo)


def _jobs(items: Sequence[Item], eff: Efficiency, prompts: int | None, latency: dict[str, float],
          handoff: dict[str, float] | None = None) -> list[Job]:
    """Jobs for ``items`` under ``eff``; ``latency`` maps a framework family (or "*" for the chip's generic
    value, used with frameworks off) to its request latency in ms; ``handoff`` a disaggregated stack to its
    KV handoff latency in ms."""
    out = []
    h = handoff or {}
    for _, s in items:
        if "*" in latency:
            out.append(Job(s, eff, prompts, latency["*"], frameworks=False, kv_handoff_ms=h.get(s.framework)))
        else:
            out.append(Job(s, eff, prompts, latency.get(s.framework), kv_handoff_ms=h.get(s.framework)))
    return out


def subsample(items: Sequence[Item], n: int | None) -> list[Item]:
    """At most ``n`` of ``items``, evenly spaced in a fixed order (by configuration), so every model, layout and
    workload region keeps its share; all of them when ``n`` is None or not smaller."""
    if not n or n >= len(items):
        return list(items)
    ordered = sorted(items, key=lambda it: repr(config_key(it[1])))
    return [ordered[int(i * len(ordered) / n)] for i in range(n)]


def fit(items: Sequence[Item], held: Sequence[Item], chip: str, names: Sequence[str], *,
        base: Efficiency | None = None, workers: int = 2, search_prompts: int = 4, final_prompts: int | None = None,
        max_iter: int = 4, max_search_points: int | None = None, progress: Progress | None = None,
        weights: dict[str, float] | None = None, handoff_nfev: int = HANDOFF_NFEV) -> FitReport:
    """Fit ``names`` for ``chip`` on ``items`` (already deduplicated), report errors on ``items`` and ``held``.

    The search is Gauss–Newton over linearised simulations (:mod:`jalapeno.calibration.gauss_newton`: one
    simulation of every search point per iteration, at most ``max_iter``), on ``weights`` (metric -> weight;
    default: output tok/s per chip and median TPOT, plus median TTFT at 0.7 when a request-latency or prefill
    parameter is fitted). ``final_prompts`` None = each point's own request count (InferenceX: 10 x
    concurrency). ``max_search_points``: the search runs on at most that many of ``items`` (:func:`subsample`;
    the tables use all of them)."""
    from jalapeno.calibration.gauss_newton import Spec, gauss_newton
    from jalapeno.calibration.predict import efficiency_of

    t0 = time.time()
    base = base if base is not None else efficiency_of(chip)
    params = [param(n, base) for n in dict.fromkeys(names)]
    eff_params = [p for p in params if not p.is_latency]
    lat_params = [p for p in params if p.is_latency]
    _check_enough(len(items), eff_params, f"fit of {chip}")
    for p in lat_params:
        _check_enough(len(_latency_items(subsample(items, max_search_points), p)), [p], f"fit of {p.name}")
    start = {p.name: current_value(p, base) for p in params}
    search = subsample(items, max_search_points)
    if weights is None:
        ttft = 0.7 if lat_params or any(p.name.startswith("prefill_") for p in params) else 0.0
        weights = {**{m: 1.0 for m in EFFICIENCY_METRICS}, "median_ttft": 1.0 if not eff_params else ttft}
    # a disaggregated stack's handoff delays requests of points the linearisation does not cover: it gets a
    # one-dimensional search of its own, after the Gauss-Newton fit of everything else
    gn_params = [p for p in params if p.field != "kv_handoff_ms"]
    handoff_params = [p for p in params if p.field == "kv_handoff_ms"]
    spec = Spec(tuple(p.name for p in gn_params), tuple((p.lower, p.upper) for p in gn_params), weights,
                lambda s, v: apply_params(base, v), _latency_overrides)
    with Predictor(workers, progress) as pred:
        gn = None
        values = dict(start)
        if gn_params:
            gn = gauss_newton(search, spec, {p.name: start[p.name] for p in gn_params}, prompts=search_prompts,
                              mapper=pred.map, max_iter=max_iter)
            values.update(gn.values)
        eff = apply_params(base, values)
        for p in handoff_params:
            sel = _latency_items(search, p)
            key = p.framework or "*"

            def resid_lat(x: np.ndarray, sel=sel, key=key, p=p) -> np.ndarray:
                v = {key: float(x[0])}
                jobs = _jobs(sel, eff, search_prompts, {}, v)
                return log_residuals(sel, pred.run(jobs, f"{p.name} fit"), LATENCY_METRICS)

            values[p.name] = float(_least_squares(resid_lat, np.array([start[p.name]]), [p], handoff_nfev)[0])
        tables, failures = _tables(pred, items, held, base, eff, start, values, final_prompts)
        runs = pred.runs
    rep = FitReport(chip, params, start, values, len(items), len(held), tables, runs, time.time() - t0,
                    failures=failures, n_search=len(search))
    if gn is not None:
        rep.iterations = [{k: (None if isinstance(v, float) and v != v else v) for k, v in it.__dict__.items()}
                          for it in gn.iterations]
        rep.converged = gn.converged
        rep.stop = gn.stop
    return rep


def _latency_items(items: Sequence[Item], p: Param) -> list[Item]:
    return [it for it in items if "median_ttft" in it[0].metrics and (p.framework is None or it[1].framework == p.framework)]


def _latency_overrides(values: dict[str, float], field_: str = "request_overhead_ms") -> dict[str, float]:
    return {k.split("@", 1)[1]: v for k, v in values.items() if k.startswith(field_ + "@")}


def _tables(pred: Predictor, items, held, base, eff, start, values, prompts):
    tables: dict[str, dict[str, ErrorSummary]] = {}
    failures: list[str] = []
    for name, sel in (("fit", items), ("held-out", held)):
        for when, e, vals in (("before", base, start), ("after", eff, values)):
            lat = _latency_overrides(vals)
            if "request_overhead_ms" in vals and not lat:
                pass  # the chip's generic value is already in ``e``
            preds = pred.run(_jobs(sel, e, prompts, lat, _latency_overrides(vals, "kv_handoff_ms")),
                             f"{when} tables ({name})")
            tables[f"{when} {name}"] = error_table(sel, preds)
            if when == "after":
                failures += [f"{p.label}: {pr['error']}" for (p, _), pr in zip(sel, preds) if "error" in pr]
    return tables, failures


# ------------------------------------------------------------------------------------------------ MTP
def fit_mtp_acceptance(items: Sequence[Item], eff: Efficiency | dict[str, Efficiency] | None = None, *,
                       workers: int = 2, search_prompts: int = 4, max_nfev: int = 10,
                       progress: Progress | None = None) -> list:
    """One MTP acceptance rate per (model, framework family) from the ``spec_decoding=mtp`` points of ``items``
    (efficiency held: ``eff``, or per chip, or each chip's catalogue block when None), fitted on output tok/s
    per chip and median TPOT. Returns :class:`~jalapeno.calibration.mtp.MtpFit` entries."""
    from jalapeno.calibration.mtp import MtpFit
    from jalapeno.calibration.predict import efficiency_of

    def eff_of(chip: str) -> Efficiency:
        if isinstance(eff, Efficiency):
            return eff
        return (eff or {}).get(chip) or efficiency_of(chip)

    groups: dict[tuple[str, str], list[Item]] = defaultdict(list)
    for p, s in items:
        if s.spec_tokens:
            groups[(s.model, s.framework)].append((p, s))
    out = []
    acc = Param("mtp_acceptance", 0.05, 1.0)
    with Predictor(workers, progress) as pred:
        for (model, fw), sel in sorted(groups.items()):
            if len(sel) < POINTS_PER_PARAM:
                continue

            def resid(x: np.ndarray, sel=sel) -> np.ndarray:
                jobs = [Job(replace(s, spec_acceptance=(float(x[0]),) * s.spec_tokens), eff_of(s.chip),
                            search_prompts) for _, s in sel]
                return log_residuals(sel, pred.run(jobs, f"MTP {model} {fw}"), EFFICIENCY_METRICS)

            a = float(_least_squares(resid, np.array([sel[0][1].spec_acceptance[0]]), [acc], max_nfev)[0])
            chips = ", ".join(sorted({s.chip for _, s in sel}))
            out.append(MtpFit(model, fw, a, len(sel), f"{len(sel)} MTP configurations ({chips}), fit split"))
    return out


__all__ = [
    "DEFAULT_PARAMS", "FitReport", "Job", "Param", "Predictor", "Prepared", "apply_params", "current_value",
    "dedupe", "error_table", "fit", "fit_mtp_acceptance", "subsample", "log_residuals", "param", "parameter_names",
    "prepare", "run_job", "split_items",
]
