"""``jalapeno bench --compare-sim``: run the benchmark's exact workload (same lengths, same arrivals, same
load shape) through the simulator — the one engine with :class:`~jalapeno.sim.backend.SimBackend` on a
virtual clock — and return the same metrics object as the measurement."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jalapeno.bench.client import BenchRequest
from jalapeno.metrics import SLO


def simulate_workload(
    requests: Sequence[BenchRequest],
    arrivals: np.ndarray,
    load,  # jalapeno.bench.loadgen.LoadSpec
    *,
    hardware: str,
    model: str,
    tp: int = 1,
    precision: str | None = None,
    slo: SLO | None = None,
    prompt_lens: Sequence[int] | None = None,
    limits=None,
    sent_s: Sequence[float] | None = None,
) -> dict:
    """Predicted metrics for ``requests`` on ``tp`` × ``hardware`` running catalogue ``model``.

    ``prompt_lens`` overrides the workload's prompt lengths (use the server-reported ``usage.prompt_tokens``,
    which is what the server actually prefilled); output lengths are the requested ``max_tokens``. ``limits``
    (:class:`jalapeno.sim.SimLimits`): the engine's limits; default: the simulator's (as ``jalapeno simulate``).
    ``sent_s`` (closed loop only): when the client actually sent each request (the run's ``start_s``); the
    simulated first wave is then released at those times (:func:`first_wave_arrivals`) instead of all at t = 0.
    """
    from jalapeno.sim import build_sim_engine, cost_model_for, run_workload
    from jalapeno.workload import Workload

    isl = np.asarray(prompt_lens if prompt_lens is not None else [r.prompt_len for r in requests], dtype=np.int64)
    osl = np.asarray([r.output_len for r in requests], dtype=np.int64)
    if load.concurrency is not None and sent_s is not None:
        wl = Workload(isl, osl, arrival_s=first_wave_arrivals(sent_s, load.concurrency),
                      max_concurrency=load.concurrency)
    elif load.concurrency is not None:
        wl = Workload(isl, osl, concurrency=load.concurrency)
    else:
        wl = Workload(isl, osl, arrival_s=np.asarray(arrivals, dtype=float), max_concurrency=load.max_concurrency)
    kv = "fp32" if precision == "fp32" else "bf16"  # a float32 engine keeps its KV cache in float32 too
    cm = cost_model_for(model, hardware, tp=tp, precision=precision or "native", kv=kv)
    engine = build_sim_engine(cm, limits=limits, in_flight=load.concurrency or load.max_concurrency)
    return run_workload(engine, wl).metrics(num_chips=tp, slo=slo)


def first_wave_arrivals(sent_s: Sequence[float], concurrency: int) -> np.ndarray:
    """Arrival times that release a closed loop's first wave as a client did: the first ``concurrency`` requests at
    the times they were sent (relative to the first; made non-decreasing), every later one at the last of those
    (it then waits for a free slot, its clock starting when it is sent, as the client's does). A real client's
    first wave is spread over milliseconds, so the engine starts its first step with the first prompt and the
    others' prefills land in steps where earlier sequences already decode; released together, all prefill in
    one step and decode in lockstep."""
    t = np.asarray(sent_s, dtype=np.float64)
    if not t.size:
        return t
    c = min(concurrency, t.size)
    first = np.maximum.accumulate(t[:c] - t[:c].min())
    return np.concatenate([first, np.full(t.size - c, first[-1])])
