"""Running sweep points: the one adapter to the simulator, and the local-pool / Ray drivers.

:func:`run_point` is the only function that knows how the simulator is called: a point dict in, the metrics dict
of ``jalapeno simulate --json`` out. Everything else (grid, resume, economics, Pareto, recommend) works on
those dicts. :func:`run_sweep` runs points on a local process pool (default) or as Ray tasks, writing each
finished point to the :class:`~jalapeno.report.store.ResultStore` at once.

The local pool (:func:`_run_local`): the point function goes to each worker once (the pool's initializer), not
with every task; workers are forked from a parent that has already imported the simulator where the platform
allows it (a spawned worker imports it itself). The default point function, :class:`PointRunner`, shares the
cost models of one worker's points (:class:`~jalapeno.sim.factory.CostModelCache`).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, Iterable

from jalapeno.errors import CapacityError, ConfigError, JalapenoError
from jalapeno.economics import point_chips
from jalapeno.report.grid import POINT_KEYS, point_id
from jalapeno.report.store import ResultStore

PointFn = Callable[[dict], dict]


def run_point(point: dict, cost_models=None) -> dict:  # noqa: ANN001 - a CostModelCache, imported lazily
    """Simulate one point and return its metrics: the dict ``jalapeno simulate --json`` prints, with its nested
    ``sim`` block flattened (``sim_steps``, ``sim_preemptions``, ...) so every value is one parquet column.

    This is the one place that knows the simulator's entry point (:func:`jalapeno.sim.scenario.run_scenario`).
    It raises :class:`CapacityError` when the model does not fit and :class:`ConfigError` for layouts or options
    the simulator rejects; :func:`execute` records both as ``status = "skipped"`` rows with the message.
    ``cost_models``: a :class:`~jalapeno.sim.factory.CostModelCache` to build the cost models from (the same
    rows; a sweep's points with the same model, chip, layout and precision share one).
    """
    from jalapeno.sim.scenario import flat, run_scenario

    return flat(run_scenario(point_scenario(point), cost_models=cost_models))


class PointRunner:
    """The sweeps' default point function: :func:`run_point` with a cost-model cache owned by this runner.

    A sweep run makes one; each worker process it is sent to unpickles its own, with an empty cache, so the
    cache is shared by the points of one worker and of one run only (never global, never pickled per task)."""

    def __init__(self) -> None:
        from jalapeno.sim.factory import CostModelCache

        self.cost_models = CostModelCache()

    def __call__(self, point: dict) -> dict:
        return run_point(point, self.cost_models)

    @staticmethod
    def preload() -> None:
        """Import the simulator, so workers forked after this call start with it loaded."""
        import jalapeno.hardware.confidence  # noqa: F401
        import jalapeno.metrics  # noqa: F401
        import jalapeno.sim.scenario  # noqa: F401


def point_scenario(point: dict):
    """The :class:`jalapeno.sim.scenario.Scenario` (``simulate``'s flags) of a sweep point."""
    from jalapeno.sim.scenario import Scenario

    goodput = []
    if point.get("slo_ttft_ms") is not None:
        goodput.append(f"ttft:{point['slo_ttft_ms']}")
    if point.get("slo_tpot_ms") is not None:
        goodput.append(f"tpot:{point['slo_tpot_ms']}")
    method = point.get("spec_method")
    spec: dict = {}
    if method not in (None, "", "none"):
        spec = {"spec_decode": method, "spec_tokens": int(point.get("spec_tokens") or 1)}
        if point.get("spec_acceptance") is not None:
            spec["acceptance"] = str(point["spec_acceptance"])
        if point.get("spec_draft_model"):
            spec["draft_model"] = point["spec_draft_model"]
    common = dict(
        model=point["model"], precision=point.get("weights") or "native", kv_dtype=point.get("kv") or "bf16",
        isl=int(point["isl"]), osl=int(point["osl"]), concurrency=int(point["concurrency"]),
        num_prompts=point.get("num_prompts"), goodput=goodput, seed=int(point.get("seed") or 0),
        framework=point.get("framework") or None, power_cap_w=_opt_float(point.get("power_cap_w")),
        early_stop=_opt_float(point.get("early_stop")), **spec,
    )
    budget = _opt_float(point.get("max_num_batched_tokens"))  # None or NaN (parquet) = the simulator's default
    if budget is not None:
        common["max_num_batched_tokens"] = int(budget)
    if point.get("mode") == "disaggregated":
        return Scenario(
            hardware=point["hardware"], prefill_hardware=point["prefill_hardware"],
            prefill_workers=int(point["prefill_workers"]), prefill_tp=int(point["prefill_tp"]), prefill_ep=1,
            decode_hardware=point["hardware"], decode_workers=int(point["decode_workers"]),
            decode_tp=int(point["tp"]), decode_ep=int(point["ep"]), decode_pp=int(point.get("pp") or 1),
            decode_dp_attention=bool(point.get("dp_attention")), prefill_precision=point.get("prefill_weights") or None,
            decode_precision=point.get("decode_weights") or None, **common,
        )
    return Scenario(
        hardware=point["hardware"], tp=int(point["tp"]), ep=int(point["ep"]), pp=int(point["pp"]),
        dp=int(point["dp"]), dp_attention=bool(point["dp_attention"]), **common,
    )


def _opt_float(v: object) -> float | None:
    """A float, or None for None/NaN (parquet gives NaN for a missing float)."""
    if v is None:
        return None
    f = float(v)  # type: ignore[arg-type]
    return None if f != f else f


# ---------------------------------------------------------------------------------------------------------
def execute(point_fn: PointFn, point: dict) -> dict:
    """Run one point and always return a result row (never raises): inputs + metrics + status/error."""
    row = {k: point.get(k) for k in POINT_KEYS}
    row["point_id"] = point.get("point_id") or point_id(point)
    row["_order"] = point.get("_order", 0)
    if point.get("skip_reason"):
        kind = "capacity" if point["skip_reason"].startswith("does not fit") else "layout"
        return {**row, "status": "skipped", "error": point["skip_reason"], "error_kind": kind, "num_chips": point_chips(point)}
    t0 = time.perf_counter()
    try:
        metrics = _without_collector(point_fn, {k: point.get(k) for k in POINT_KEYS})
        row.update({k: v for k, v in metrics.items() if k not in row})
        row["status"], row["error"], row["error_kind"] = "ok", None, None
    except CapacityError as exc:
        row["status"], row["error"], row["error_kind"] = "skipped", str(exc), "capacity"
    except ConfigError as exc:
        row["status"], row["error"], row["error_kind"] = "skipped", str(exc), "config"
    except JalapenoError as exc:
        row["status"], row["error"], row["error_kind"] = "error", str(exc), "error"
    except Exception as exc:  # a bug in one point must not lose the others; keep where it came from
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
        row["status"], row["error"], row["error_kind"] = "error", f"{type(exc).__name__}: {exc}{where}", "bug"
    row.setdefault("num_chips", point_chips(point))
    row["sim_wall_s"] = time.perf_counter() - t0
    return row


def _without_collector(point_fn: PointFn, point: dict) -> dict:
    """``point_fn(point)`` with Python's cyclic garbage collector paused (restored after, also on an error).

    A simulation makes no reference cycles (reference counting frees it: ``client.drive`` already pauses the
    collector inside the run), but with the collector back on between the run and the point's end, the next
    allocations set off a pass over every object the run still held — its outcomes, sequences and calls, about to
    be freed anyway (≈ 4 % of a sweep worker's CPU on the InferenceX grid). Paused over the whole point, they are
    freed by reference counting first, and the young generation's count falls back with them."""
    from jalapeno.sim.client import cyclic_gc_paused

    with cyclic_gc_paused():
        return point_fn(point)


@dataclass
class SweepSummary:
    total: int = 0
    already_done: int = 0
    ran: int = 0
    ok: int = 0
    skipped: int = 0
    errors: int = 0
    interrupted: bool = False
    first_errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        s = f"{self.total} points: {self.already_done} already done, {self.ran} run ({self.ok} ok, {self.skipped} skipped, {self.errors} errors)"
        return s + (" — interrupted, finished points kept" if self.interrupted else "")


def run_sweep(
    points: Iterable[dict],
    store: ResultStore,
    *,
    point_fn: PointFn | None = None,
    workers: int | None = None,
    ray: str | None = None,
    progress: bool = True,
    enrich: Callable[[dict], dict] | None = None,
) -> SweepSummary:
    """Run the points not already in ``store`` (rows with ``status = "error"`` are retried) and compact the
    store (also on Ctrl-C, then re-raise).

    ``workers``: local processes (default ``os.cpu_count()``; 1 runs in this process). ``ray``: ``"auto"``
    (a running cluster if there is one, else a local Ray instance) or a cluster address; needs ``jalapeno[ray]``.
    ``point_fn``: default a new :class:`PointRunner` (the simulator, its cost-model cache owned by this run).
    """
    point_fn = point_fn or PointRunner()
    pts = []
    for i, p in enumerate(points):
        p = dict(p)
        p["point_id"] = point_id(p)
        p["_order"] = i
        pts.append(p)
    done = store.done_ids()
    todo = [p for p in pts if p["point_id"] not in done]
    summary = SweepSummary(total=len(pts), already_done=len(pts) - len(todo))

    def on_row(row: dict) -> None:
        store.append(row)
        summary.ran += 1
        st = row["status"]
        if st == "ok":
            summary.ok += 1
        elif st == "skipped":
            summary.skipped += 1
        else:
            summary.errors += 1
            if len(summary.first_errors) < 3:
                summary.first_errors.append(f"{row['model']} on {row['hardware']}: {row['error']}")

    try:
        with _progress(progress, len(todo)) as advance:

            def sink(row: dict) -> None:
                on_row(row)
                advance()

            if ray:
                _run_ray(todo, ray, point_fn, sink)
            else:
                _run_local(todo, workers or os.cpu_count() or 1, point_fn, sink)
    except BaseException as exc:  # Ctrl-C, a crashed worker pool...: keep every finished point, then re-raise
        summary.interrupted = isinstance(exc, KeyboardInterrupt)
        store.compact(enrich)
        raise
    store.compact(enrich)
    return summary


def run_points(points: Iterable[dict], *, point_fn: PointFn | None = None, workers: int | None = None) -> list[dict]:
    """Run points without a store (``recommend``'s small internal sweeps); rows come back in input order.
    ``point_fn``: default a new :class:`PointRunner`."""
    pts = [{**p, "point_id": point_id(p), "_order": i} for i, p in enumerate(points)]
    rows: list[dict] = []
    _run_local(pts, workers or os.cpu_count() or 1, point_fn or PointRunner(), rows.append)
    return sorted(rows, key=lambda r: r["_order"])


#: the point function of a pool worker process, set once by the pool's initializer (:func:`_init_worker`); it
#: lives as long as that worker, which belongs to one :func:`_run_local` call's pool
_WORKER_FN: PointFn | None = None


def _init_worker(point_fn: PointFn) -> None:
    global _WORKER_FN
    _WORKER_FN = point_fn


def _run_in_worker(point: dict) -> dict:
    assert _WORKER_FN is not None, "the pool's initializer sets the point function"
    return execute(_WORKER_FN, point)


def pool_context() -> multiprocessing.context.BaseContext:
    """The start method of the local pool's workers: ``fork`` where the platform has it and it is safe (Linux
    and the other POSIX systems but macOS, where Python defaults to ``spawn``), so a worker starts with the
    parent's imports; else the platform's default (the workers import what they need)."""
    if sys.platform != "darwin" and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _run_local(points: list[dict], workers: int, point_fn: PointFn, sink: Callable[[dict], None]) -> None:
    runnable = [p for p in points if not p.get("skip_reason")]
    for p in points:  # skipped points need no worker
        if p.get("skip_reason"):
            sink(execute(point_fn, p))
    if workers <= 1 or len(runnable) <= 1:
        for p in runnable:
            sink(execute(point_fn, p))
        return
    ctx = pool_context()
    preload = getattr(point_fn, "preload", None)
    if preload is not None and ctx.get_start_method() == "fork":
        preload()  # once here rather than once per worker
    ex = ProcessPoolExecutor(max_workers=min(workers, len(runnable)), mp_context=ctx, initializer=_init_worker,
                             initargs=(point_fn,))
    try:
        pending = {ex.submit(_run_in_worker, p) for p in runnable}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                sink(f.result())
    except BaseException:
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    ex.shutdown(wait=True)


def _run_ray(points: list[dict], address: str, point_fn: PointFn, sink: Callable[[dict], None],
             task: Callable[[PointFn, dict], dict] = execute) -> None:
    """Run ``task(point_fn, point)`` for every point as Ray tasks (``jalapeno design`` passes its own task)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray, which is not installed: pip install 'jalapeno[ray]'") from None
    started = False
    if not ray.is_initialized():
        if address == "auto":
            try:
                ray.init(address="auto", log_to_driver=False)
            except ConnectionError:  # no running cluster: start a local one
                ray.init(include_dashboard=False, log_to_driver=False)
        else:
            try:
                ray.init(address=address, log_to_driver=False)
            except (ConnectionError, ValueError) as exc:
                raise ConfigError(f"--ray {address}: cannot connect to a Ray cluster ({exc}); use --ray auto for a local one") from None
        started = True
    try:
        remote = ray.remote(task)
        refs = [remote.remote(point_fn, p) for p in points]
        while refs:
            done, refs = ray.wait(refs, num_returns=1)
            sink(ray.get(done[0]))
    finally:
        if started:
            ray.shutdown()


class _progress:
    """A rich progress bar (or nothing) yielding an ``advance()`` callable."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total, self._p = enabled, total, None

    def __enter__(self) -> Callable[[], None]:
        if not self.enabled or self.total == 0:
            return lambda: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._p = Progress(
            TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(), transient=False
        )
        self._p.start()
        tid = self._p.add_task("sweep", total=self.total)
        return lambda: self._p.advance(tid)  # type: ignore[union-attr]

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.stop()
