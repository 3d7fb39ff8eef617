"""Serving-stack scheduling policies (EngineConfig ``separate_prefill``, ``max_prefill_tokens``,
``recv_interval``) through the ONE scheduler, on a cost model whose step time is hand-countable:
5 ms + 0.02 ms per token (FakeCostModel with the context terms off)."""

import pytest
from jalapeno.testing.engine_fakes import hand_count_engine, run_to_completion

from jalapeno.engine import EngineConfig, SamplingParams
from jalapeno.errors import ConfigError

BASE, TOK = 5e-3, 2e-5  # seconds per step, per token


def make(multi=False, **cfg):
    return hand_count_engine(BASE, TOK, multi, **cfg)


run = run_to_completion


def scenario(e, decode_steps_before_b=2):
    """A (100-token prompt) alone, ``decode_steps_before_b`` steps, then B (200 tokens) arrives."""
    a = e.add_request(prompt_len=100, sampling=SamplingParams(max_tokens=10), request_id="a")
    e.step()  # A's prefill
    for _ in range(decode_steps_before_b):
        e.step()
    b = e.add_request(prompt_len=200, sampling=SamplingParams(max_tokens=3), request_id="b")
    run(e)
    return a, b


def test_mixed_prefill_rides_with_the_decodes():
    a, b = scenario(make())
    assert a.first_token_s == pytest.approx(BASE + 100 * TOK)  # 7 ms
    # B's prefill (200) and A's decode (1) in one step: 5 + 201 x 0.02 = 9.02 ms
    assert b.first_token_s - b.arrival_s == pytest.approx(BASE + 201 * TOK)


def test_separate_prefill_pauses_the_decodes():
    e = make(separate_prefill=True)
    a, b = scenario(e)
    # B's prefill alone: 5 + 200 x 0.02 = 9 ms; then A and B decode together
    assert b.first_token_s - b.arrival_s == pytest.approx(BASE + 200 * TOK)
    # A's 10 tokens: prefill (7 ms), 2 decodes (5.02 each), B's prefill step (9 ms, A paused), then 7 decodes
    # (with B for its 2 remaining: 5.04 ms each, then alone 5.02)
    expect = (BASE + 100 * TOK) + 2 * (BASE + TOK) + (BASE + 200 * TOK) + 2 * (BASE + 2 * TOK) + 5 * (BASE + TOK)
    assert a.finish_s == pytest.approx(expect)


def test_max_prefill_tokens_caps_a_prefill_only_step():
    e = make(separate_prefill=True, max_prefill_tokens=64)
    s = e.add_request(prompt_len=100, sampling=SamplingParams(max_tokens=2), request_id="s")
    run(e)
    # chunks of 64 + 36 tokens: 2 steps (5 + 1.28 ms, 5 + 0.72 ms)
    assert s.first_token_s == pytest.approx(2 * BASE + 100 * TOK)


def test_recv_interval_holds_new_requests_until_the_poll():
    e = make(recv_interval=3)
    a, b = scenario(e, decode_steps_before_b=1)
    # A's prefill ends a receive interval (poll), A's decode step 1 of 3: B arrives, waits 2 more decode
    # steps of A (5.02 ms each), then prefills with A's decode (9.02 ms)
    assert b.first_token_s - b.arrival_s == pytest.approx(2 * (BASE + TOK) + BASE + 201 * TOK)
    # the same run without the interval: no wait
    a2, b2 = scenario(make(), decode_steps_before_b=1)
    assert b2.first_token_s - b2.arrival_s == pytest.approx(BASE + 201 * TOK)


def test_recv_interval_idle_engine_receives_at_once():
    e = make(recv_interval=30)
    s = e.add_request(prompt_len=100, sampling=SamplingParams(max_tokens=2), request_id="s")
    run(e)
    assert s.first_token_s == pytest.approx(BASE + 100 * TOK)


def test_recv_interval_same_with_multi_step_batches():
    """Multi-step batches end at the next receive: a closed loop gives the same times as one step per call."""
    from jalapeno.sim import run_workload
    from jalapeno.workload import inferencex_workload

    def times(multi):
        e = make(multi=multi, recv_interval=4, separate_prefill=True)
        res = run_workload(e, inferencex_workload(64, 32, concurrency=4, num_prompts=16, range_ratio=0.5, seed=1))
        m = res.metrics(num_chips=1)
        return [m["median_ttft_ms"], m["median_tpot_ms"], m["output_throughput_per_chip"]]

    multi, single = times(True), times(False)
    assert multi == pytest.approx(single, rel=1e-9)
    without = make(separate_prefill=True)
    res = run_workload(without, inferencex_workload(64, 32, concurrency=4, num_prompts=16, range_ratio=0.5, seed=1))
    assert res.metrics(num_chips=1)["median_ttft_ms"] < single[0]  # the interval delays first tokens


def test_policy_defaults_change_nothing_and_bad_values_are_refused():
    cfg = EngineConfig()
    assert (cfg.separate_prefill, cfg.max_prefill_tokens, cfg.recv_interval) == (False, None, 1)
    with pytest.raises(ConfigError):
        EngineConfig(recv_interval=0)
