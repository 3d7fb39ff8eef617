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
    kv_tokens: int | None = None,
) -> dict:
    """Predicted metrics for ``requests`` on ``tp`` × ``hardware`` running catalogue ``model``.

    ``prompt_lens`` overrides the workload's prompt lengths (use the server-reported ``usage.prompt_tokens``,
    which is what the server actually prefilled); output lengths are the requested ``max_tokens``. ``limits``
    (:class:`jalapeno.sim.SimLimits`): the engine's limits; default: the simulator's (as ``jalapeno simulate``).
    ``sent_s`` (closed loop only): when the client actually sent each request (the run's ``start_s``); the
    simulated first wave is then released at those times (:func:`first_wave_arrivals`) instead of all at t = 0.
    ``kv_tokens``: the served engine's KV-cache capacity (:func:`scrape_kv_tokens`), which caps the simulated one
    (a CPU server keeps 1 GiB; the chip's memory would hold far more, and the simulated engine would never preempt
    where the served one does).
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
    engine = build_sim_engine(cm, limits=limits, in_flight=load.concurrency or load.max_concurrency,
                              backend_cls=kv_capped(kv_tokens))
    return run_workload(engine, wl).metrics(num_chips=tp, slo=slo)


def kv_capped(kv_tokens: int | None):
    """The simulated backend class whose KV cache holds at most ``kv_tokens`` tokens (None: the plain
    :class:`~jalapeno.sim.backend.SimBackend`, sized from the chip's memory)."""
    from jalapeno.sim.backend import SimBackend

    if not kv_tokens:
        return SimBackend
    cap = int(kv_tokens)

    class KVCapped(SimBackend):
        def num_kv_blocks(self, block_size: int) -> int:
            return min(super().num_kv_blocks(block_size), cap // block_size)

    return KVCapped


def parse_kv_tokens(text: str) -> int | None:
    """KV-cache tokens of a server from its Prometheus exposition ``text`` (Jalapeño's ``jalapeno_kv_blocks_total``
    x ``jalapeno_kv_block_size``); None when it exposes either not."""
    from prometheus_client.parser import text_string_to_metric_families

    got = {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples}
    blocks, size = got.get("jalapeno_kv_blocks_total"), got.get("jalapeno_kv_block_size")
    return int(blocks * size) if blocks and size else None


def scrape_kv_tokens(base_url: str, api_key: str | None = None) -> int | None:
    """GET the server's ``/metrics`` (next to ``/v1``) and read its KV-cache capacity (:func:`parse_kv_tokens`);
    None for a server without them (any other stack) or no ``/metrics``."""
    from jalapeno.bench.spec_counters import fetch_metrics_text

    text = fetch_metrics_text(base_url, api_key)
    if text is None:
        return None
    try:
        return parse_kv_tokens(text)
    except ValueError:
        return None


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
