"""Multi-step decode is an optimisation only: results equal step-by-step simulation to float precision."""

import math

import pytest
from jalapeno.testing.engine_fakes import FakeCostModel, assert_same

from jalapeno.sim.backend import SimBackend
from jalapeno.engine import Engine, EngineConfig
from jalapeno.workload import Workload, inferencex_workload
from jalapeno.sim.client import run_workload


def run(wl, max_steps, kv_tokens=1 << 20, cfg=None):
    cm = FakeCostModel(kv_tokens=kv_tokens)
    b = SimBackend(cm, keep_trace=True)
    b.max_multi_step = max_steps
    e = Engine(b, cfg or EngineConfig(max_num_seqs=32, max_num_batched_tokens=2048, block_size=16))
    r = run_workload(e, wl)
    return r, r.metrics(num_chips=8), b, e


@pytest.mark.parametrize(
    "wl",
    [
        inferencex_workload(300, 200, request_rate=40.0, num_prompts=120, seed=1),  # Poisson, open loop
        inferencex_workload(300, 200, concurrency=24, num_prompts=100, seed=2),  # closed loop
        inferencex_workload(200, 100, request_rate=30.0, num_prompts=60, max_concurrency=8, chain_calls=3, seed=3),
    ],
    ids=["poisson", "closed", "chains"],
)
def test_multi_step_equals_step_by_step(wl):
    r1, m1, b1, _ = run(wl, 1)
    rk, mk, bk, _ = run(wl, 1 << 30)
    assert_same(m1, mk)
    assert r1.num_steps == rk.num_steps
    assert len(bk.trace) < len(b1.trace) / 3  # far fewer backend calls
    assert max(t["steps"] for t in bk.trace) > 10
    o1 = sorted((o.start_s, o.ttft_s, o.e2el_s) for o in r1.outcomes)
    ok = sorted((o.start_s, o.ttft_s, o.e2el_s) for o in rk.outcomes)
    assert all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(o1, ok) for x, y in zip(a, b))


def test_multi_step_equals_step_by_step_under_kv_pressure():
    # 40 blocks of 16 tokens for up to 32 sequences of ~500 tokens: admission stalls and preemptions happen
    wl = inferencex_workload(300, 200, request_rate=50.0, num_prompts=80, seed=4)
    r1, m1, _, e1 = run(wl, 1, kv_tokens=40 * 16)
    rk, mk, _, ek = run(wl, 1 << 30, kv_tokens=40 * 16)
    assert e1.stats.num_preemptions > 0
    assert e1.stats.num_preemptions == ek.stats.num_preemptions
    assert_same(m1, mk)


def test_multi_step_is_cut_at_the_next_arrival():
    wl = Workload([100, 100], [500, 500], arrival_s=[0.0, 1.0])
    r, m, b, _ = run(wl, 1 << 30)
    t, bounds, second = 0.0, [0.0], None
    for rec in b.trace:
        if rec["prefill_tokens"] and t > 0.5:
            second = t  # the event that prefills the second request starts here
        for d in rec["step_durations"]:
            t += d
            bounds.append(t)
    assert second is not None
    i = bounds.index(second)
    # it starts at the first step boundary at/after the arrival at t = 1.0
    assert bounds[i - 1] < 1.0 <= bounds[i]
    assert max(rec["steps"] for rec in b.trace) > 100
