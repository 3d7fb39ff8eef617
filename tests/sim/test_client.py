"""Engine.run: closed/open loop arrivals, metric relations, Little's law, chains, speculative decoding."""

import math

import numpy as np
import pytest
from jalapeno.testing.engine_fakes import FakeCostModel

from jalapeno.sim.backend import SimBackend, Speculation
from jalapeno.engine import Engine, EngineConfig
from jalapeno.sim.client import EngineTarget, drive
from jalapeno.workload import Workload, inferencex_workload
from jalapeno.sim.client import run_workload


class Probe(EngineTarget):
    """Records (time, requests in flight, step length) at every event."""

    def __init__(self, engine):
        super().__init__(engine)
        self.samples = []

    def advance(self, horizon):
        t0 = self.now()
        s = self.engine.scheduler
        inflight = len(s.running) + len(s.waiting)
        out = super().advance(horizon)
        self.samples.append((t0, inflight, self.now() - t0))
        return out


def make(cfg=None, spec=None, **cm):
    return Engine(SimBackend(FakeCostModel(**cm), speculation=spec, keep_trace=True), cfg or EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096))


def test_closed_loop_keeps_exactly_c_in_flight():
    wl = inferencex_workload(200, 100, concurrency=16, num_prompts=120, seed=0)
    e = make()
    p = Probe(e)
    r = drive(p, wl)
    assert len(r.outcomes) == 120
    done = 0
    # the requests not yet finished when each event starts: min(C, those left)
    finish = sorted(o.start_s + o.e2el_s for o in r.outcomes)
    for t0, inflight, _ in p.samples:
        done = sum(1 for f in finish if f <= t0)
        assert inflight == min(16, 120 - done)


def test_metric_relations():
    wl = inferencex_workload(300, 150, request_rate=5.0, num_prompts=80, seed=1)
    e = make()
    r = run_workload(e, wl)
    m = r.metrics(num_chips=4)
    for o in r.outcomes:
        assert 0 < o.ttft_s <= o.e2el_s
        assert math.isclose(o.tpot_s, (o.e2el_s - o.ttft_s) / (o.output_tokens - 1))
    # the pooled ITLs are exactly the gaps between tokens: one per token after the first, summing to E2E - TTFT
    assert r.itl_counts.sum() == sum(o.output_tokens - 1 for o in r.outcomes)
    assert math.isclose((r.itl_values * r.itl_counts).sum(), sum(o.e2el_s - o.ttft_s for o in r.outcomes), rel_tol=1e-9)
    assert m["total_output_tokens"] == int(wl.output_lens.sum())
    assert m["total_input_tokens"] == int(wl.input_lens.sum())
    assert math.isclose(m["output_throughput"], m["total_output_tokens"] / m["duration"])
    assert math.isclose(m["duration"], max(o.start_s + o.e2el_s for o in r.outcomes))
    assert math.isclose(m["median_interactivity"], 1000 / m["median_tpot_ms"])
    # the fake draws 700 W busy and 100 W idle: the average lies between, weighted by busy time
    busy = sum(t["duration_s"] for t in e.backend.trace)
    deployment = (700 * busy + 100 * (m["duration"] - busy)) / m["duration"]
    assert m["avg_power_w_deployment"] == pytest.approx(deployment)
    assert m["avg_power_w_per_chip"] == pytest.approx(deployment / 4)  # metrics(num_chips=4)
    assert m["avg_power_w"] == m["avg_power_w_deployment"]  # the old key, kept for its consumers
    assert busy < 0.99 * m["duration"]
    assert m["output_tokens_per_joule"] == pytest.approx(m["total_output_tokens"] / r.energy_j)


def test_littles_law_open_loop():
    rate = 6.0
    wl = inferencex_workload(400, 200, request_rate=rate, num_prompts=600, seed=2)
    e = make()
    p = Probe(e)
    r = drive(p, wl)
    # time-average number in the system, integrated from the engine's own state at each event ...
    busy = sum(n * dt for _, n, dt in p.samples)
    L = busy / r.duration_s
    # ... equals arrival rate × mean time in system (from the per-request outcomes)
    lam = len(r.outcomes) / r.duration_s
    W = np.mean([o.e2el_s for o in r.outcomes])
    assert L == pytest.approx(lam * W, rel=0.05)
    assert lam == pytest.approx(rate, rel=0.1)


def test_spec_decode_raises_tokens_per_step_by_expected_accepted_length():
    acc = (0.8, 0.6, 0.5)
    spec = Speculation("ngram", 3, acc)
    expected = 1 + 0.8 + 0.8 * 0.6 + 0.8 * 0.6 * 0.5
    assert spec.expected_tokens == pytest.approx(expected)
    osl = 2001
    wl = Workload([64], [osl], concurrency=1)
    e = make(EngineConfig(max_num_seqs=4, max_num_batched_tokens=4096, num_speculative_tokens=3), spec=spec)
    r = run_workload(e, wl)
    decode_steps = r.num_steps - 1  # one prefill step
    assert (osl - 1) / decode_steps == pytest.approx(expected, rel=0.01)
    base = run_workload(make(), wl)
    assert base.num_steps - 1 == osl - 1
    assert base.metrics()["mean_tpot_ms"] / r.metrics()["mean_tpot_ms"] == pytest.approx(expected, rel=0.1)


def test_spec_decode_verifies_one_plus_k_tokens_and_prices_the_draft():
    spec_cm = FakeCostModel()
    draft = FakeCostModel(base_s=1e-3)
    spec = Speculation("draft", 2, 0.7, draft_cost_model=draft)
    b = SimBackend(spec_cm, speculation=spec, keep_trace=True)
    e = Engine(b, EngineConfig(max_num_seqs=4, max_num_batched_tokens=64, num_speculative_tokens=2))
    run_workload(e, Workload([10, 10], [50, 50], concurrency=2))
    assert draft.calls > 0
    dec = [t for t in b.trace if t["decode_seqs"] and not t["prefill_tokens"]]
    assert dec
    # with a draft of base 1 ms per draft step, each target step costs >= 5 ms (target) + 2 × 1 ms (draft)
    assert all(t["duration_s"] / t["steps"] >= 5e-3 + 2e-3 for t in dec)


def test_chains_report_end_to_end_latency():
    wl = Workload([100, 20, 30, 100, 20, 30], [10, 10, 10, 10, 10, 10], concurrency=1, chain_calls=3)
    e = make()
    r = run_workload(e, wl)
    m = r.metrics()
    assert len(r.outcomes) == 6 and r.chain_e2el_s.size == 2
    # call 2 prompt = call 1 prompt + output + new tokens; call 3 likewise
    prompts = [o.prompt_tokens for o in r.outcomes]
    assert prompts == [100, 130, 170, 100, 130, 170]
    # a chain's latency spans its calls back to back
    first = r.outcomes[:3]
    assert r.chain_e2el_s[0] == pytest.approx(sum(o.e2el_s for o in first))
    assert m["mean_chain_e2el_ms"] == pytest.approx(np.mean(r.chain_e2el_s) * 1000)
    assert m["median_chain_e2el_ms"] > m["mean_e2el_ms"]


def test_spec_decode_multi_step_matches_step_by_step_token_for_token():
    wl = inferencex_workload(300, 120, request_rate=30.0, num_prompts=60, seed=11)
    cfg = EngineConfig(max_num_seqs=32, max_num_batched_tokens=2048, num_speculative_tokens=2)
    runs = []
    for steps in (1, 1 << 30):
        b = SimBackend(FakeCostModel(), speculation=Speculation("ngram", 2, 0.6))
        b.max_multi_step = steps
        runs.append(run_workload(Engine(b, cfg), wl))
    a, b = runs
    assert a.num_steps == b.num_steps
    assert [o.output_tokens for o in a.outcomes] == [o.output_tokens for o in b.outcomes]
    # multi-step prices contexts growing one token a step (decode_steps), step-by-step the accepted tokens
    assert a.metrics()["median_tpot_ms"] == pytest.approx(b.metrics()["median_tpot_ms"], rel=1e-3)
