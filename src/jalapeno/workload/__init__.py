"""Serving workloads: request lengths, arrival processes, traces and agentic chains.

Pure, seeded functions shared by the simulator (``jalapeno simulate``) and the bench client:

* :func:`sample_lengths` — InferenceX ``random`` lengths (uniform integers in ``[r·L, L]``, r = 0.8 by default)
  or vLLM's range (``[L·(1−r), L·(1+r)]``), or fixed lengths (r = 1 in InferenceX mode);
* :func:`arrival_times` — open-loop arrivals at a request rate (Poisson / gamma with burstiness, or constant);
* :func:`load_trace` — per-request lengths (and optional arrival times) from a CSV or JSONL file;
* :class:`Workload` — what :func:`jalapeno.sim.run_workload` drives: closed-loop concurrency (a finished
  request is replaced at once) or open-loop arrival times, optionally capped by a client-side max concurrency.
"""

from __future__ import annotations

from jalapeno.workload.lengths import RangeMode, arrival_times, load_trace, sample_lengths
from jalapeno.workload.spec import Workload, inferencex_workload

__all__ = ["RangeMode", "Workload", "arrival_times", "inferencex_workload", "load_trace", "sample_lengths"]
