"""The serving stack's per-request latency (client -> first scheduling) is in TTFT and E2E, not in step time."""

import dataclasses
import math

import numpy as np
from jalapeno.testing.engine_fakes import FakeCostModel

from jalapeno.sim.backend import SimBackend
from jalapeno.engine import Engine, EngineConfig
from jalapeno.workload import Workload, inferencex_workload
from jalapeno.sim.client import run_workload


def make(max_multi_step=None):
    b = SimBackend(FakeCostModel())
    if max_multi_step is not None:
        b.max_multi_step = max_multi_step
    return Engine(b, EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096))


def test_a_lone_request_is_late_by_exactly_the_latency():
    base = Workload(np.array([200]), np.array([50]), arrival_s=np.array([1.0]))
    late = dataclasses.replace(base, request_latency_s=0.040)
    a = run_workload(make(), base).outcomes[0]
    b = run_workload(make(), late).outcomes[0]
    assert math.isclose(b.ttft_s - a.ttft_s, 0.040, rel_tol=1e-9)
    assert math.isclose(b.e2el_s - a.e2el_s, 0.040, rel_tol=1e-9)
    assert math.isclose(b.tpot_s, a.tpot_s, rel_tol=1e-12)  # decode pace is unchanged


def test_closed_loop_with_latency_lowers_throughput_and_multi_step_still_equals_step_by_step():
    wl = inferencex_workload(300, 120, concurrency=8, num_prompts=48, seed=3)
    slow = dataclasses.replace(wl, request_latency_s=0.025)
    m0 = run_workload(make(), wl).metrics(num_chips=1)
    m1 = run_workload(make(), slow).metrics(num_chips=1)
    m1_step = run_workload(make(max_multi_step=1), slow).metrics(num_chips=1)
    assert m1["median_ttft_ms"] > m0["median_ttft_ms"] + 20  # at least most of the 25 ms shows in TTFT
    assert m1["output_throughput"] < m0["output_throughput"]  # each replacement request starts 25 ms later
    for k in ("median_ttft_ms", "median_tpot_ms", "median_e2el_ms", "output_throughput", "duration"):
        assert math.isclose(m1[k], m1_step[k], rel_tol=1e-9), k


def test_the_simulated_backend_brings_its_chips_serving_latency():
    """SimBackend reads ``efficiency.request_overhead_ms`` from its cost model; the simulated client adds it to arrivals."""
    import types

    class WithEff(FakeCostModel):
        eff = types.SimpleNamespace(request_overhead_ms=40.0)

    base = Workload(np.array([200]), np.array([50]), arrival_s=np.array([0.5]))
    a = run_workload(make(), base).outcomes[0]
    b = run_workload(Engine(SimBackend(WithEff()), EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096)), base).outcomes[0]
    assert math.isclose(b.ttft_s - a.ttft_s, 0.040, rel_tol=1e-9)
