"""Attention-DP context balancing (EngineConfig ``balance_ranks`` / ``balance_timeout_iters``; TensorRT-LLM
``attention_dp_config.enable_balance`` / ``timeout_iters``) through the ONE scheduler, hand-counted on a cost
model of 5 ms + 0.02 ms per token per step (FakeCostModel with the context terms off)."""

import pytest
from jalapeno.testing.engine_fakes import hand_count_engine, run_to_completion

from jalapeno.engine import EngineConfig, SamplingParams
from jalapeno.errors import ConfigError

BASE, TOK = 5e-3, 2e-5  # seconds per step, per token
DECODE2 = BASE + 2 * TOK  # a decode step of A and B: 5.04 ms
ADMIT = BASE + 102 * TOK  # A and B decode while C (100 prompt tokens) prefills: 7.04 ms


def make(multi=False, **cfg):
    return hand_count_engine(BASE, TOK, multi, **cfg)


run = run_to_completion


def arrive_after(e, decode_steps, late=("c",)):
    """A and B (100-token prompts, 50 tokens) start together, ``decode_steps`` decode steps run, then ``late``
    requests (100-token prompts, 3 tokens) arrive. Returns the late requests after the run."""
    for rid in ("a", "b"):
        e.add_request(prompt_len=100, sampling=SamplingParams(max_tokens=50), request_id=rid)
    e.step()  # A and B prefill together: an admission round (nothing decodes yet)
    for _ in range(decode_steps):
        e.step()
    out = [e.add_request(prompt_len=100, sampling=SamplingParams(max_tokens=3), request_id=r) for r in late]
    run(e)
    return out


def test_without_balancing_a_new_request_prefills_at_the_next_step():
    (c,) = arrive_after(make(), 2)
    assert c.first_token_s - c.arrival_s == pytest.approx(ADMIT)


def test_a_lone_request_waits_for_the_timeout():
    # timeout 4: the round is step 0; decode steps 1 and 2 ran; C arrives; step 3 holds it (A and B decode alone);
    # step 4 is the 4th since the round: C prefills with A's and B's decodes
    (c,) = arrive_after(make(balance_ranks=2, balance_timeout_iters=4), 2)
    assert c.first_token_s - c.arrival_s == pytest.approx(DECODE2 + ADMIT)


def test_the_count_runs_while_nothing_waits():
    # 5 decode steps before C: steps 1-3 count, step 4 is a round with nothing to admit, step 5 counts 1; C
    # arrives before step 6: held at steps 6 and 7, admitted at step 8 (the 4th after the round at step 4)
    (c,) = arrive_after(make(balance_ranks=2, balance_timeout_iters=4), 5)
    assert c.first_token_s - c.arrival_s == pytest.approx(2 * DECODE2 + ADMIT)


def test_one_request_per_rank_is_admitted_at_once():
    c, d = arrive_after(make(balance_ranks=2, balance_timeout_iters=60), 2, late=("c", "d"))
    both = BASE + (2 + 200) * TOK  # C's and D's prefills ride with A's and B's decodes
    assert c.first_token_s - c.arrival_s == pytest.approx(both)
    assert d.first_token_s - d.arrival_s == pytest.approx(both)


def test_two_requests_on_one_rank_wait_for_the_others():
    """The router puts each arrival on the rank with the fewest requests: A, C, E on rank 0, B, D on rank 1; A and
    C finish, so F and G both go to rank 0 (1 then 2 requests there vs 2 on rank 1): rank 1 has nothing waiting,
    so they are held until the timeout (4), though two requests wait for two ranks."""
    e = make(balance_ranks=2, balance_timeout_iters=4)
    for rid, n in (("a", 2), ("b", 50), ("c", 2), ("d", 50), ("e", 50)):
        e.add_request(prompt_len=100, sampling=SamplingParams(max_tokens=n), request_id=rid)
    e.step()  # round (step 0): nothing runs, all five prefill
    e.step()  # step 1: five decodes, A and C finish
    f, g = (e.add_request(prompt_len=100, sampling=SamplingParams(max_tokens=3), request_id=r) for r in "fg")
    run(e)
    # steps 2 and 3 hold them (B, D, E decode: 5.06 ms each); step 4 (the 4th since the round) admits both
    expect = 2 * (BASE + 3 * TOK) + BASE + (3 + 200) * TOK
    assert f.first_token_s - f.arrival_s == pytest.approx(expect)
    assert g.first_token_s - g.arrival_s == pytest.approx(expect)


def test_a_rank_without_decodes_admits_at_once():
    # 3 ranks, 2 running: some rank has nothing to decode, so C is not held
    (c,) = arrive_after(make(balance_ranks=3, balance_timeout_iters=60), 2)
    assert c.first_token_s - c.arrival_s == pytest.approx(ADMIT)


def test_same_with_multi_step_batches():
    """Multi-step batches end at the release step: a closed loop gives the same times as one step per call."""
    from jalapeno.sim import run_workload
    from jalapeno.workload import inferencex_workload

    def times(multi, **cfg):
        e = make(multi=multi, **cfg)
        res = run_workload(e, inferencex_workload(64, 32, concurrency=6, num_prompts=24, range_ratio=0.5, seed=1))
        m = res.metrics(num_chips=1)
        return [m["median_ttft_ms"], m["median_tpot_ms"], m["output_throughput_per_chip"]]

    single = times(False, balance_ranks=4, balance_timeout_iters=10)
    assert times(True, balance_ranks=4, balance_timeout_iters=10) == pytest.approx(single, rel=1e-9)
    assert times(False)[0] < single[0]  # the balancing delays first tokens


def test_defaults_are_off_and_bad_values_are_refused():
    cfg = EngineConfig()
    assert (cfg.balance_ranks, cfg.balance_timeout_iters) == (1, 0)
    with pytest.raises(ConfigError, match="balance_ranks"):
        EngineConfig(balance_ranks=0)
    with pytest.raises(ConfigError, match="balance_timeout_iters"):
        EngineConfig(balance_ranks=2, balance_timeout_iters=-1)
