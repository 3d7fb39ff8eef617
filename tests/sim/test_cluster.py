"""Several engines on one timeline: replicas and disaggregated prefill/decode pools."""

import math

import pytest
from jalapeno.testing.engine_fakes import FakeCostModel
from jalapeno.testing.engine_fakes import assert_same

from jalapeno.sim.backend import SimBackend
from jalapeno.engine import Engine, EngineConfig
from jalapeno.sim.cluster import Cluster, KVLink
from jalapeno.perf.shape import StepShape
from jalapeno.workload import Workload, inferencex_workload
from jalapeno.sim.client import run_workload

CFG = EngineConfig(max_num_seqs=32, max_num_batched_tokens=2048)


def eng(max_steps=1 << 30, **kw):
    b = SimBackend(FakeCostModel(**kw))
    b.max_multi_step = max_steps
    return Engine(b, CFG)


def test_cluster_of_one_equals_the_engine():
    wl = inferencex_workload(300, 100, request_rate=30.0, num_prompts=80, seed=5)
    m1 = run_workload(eng(), wl).metrics()
    m2 = Cluster([eng()]).run(wl).metrics()
    assert_same(m1, m2)


@pytest.mark.parametrize("wl", [
    inferencex_workload(300, 100, concurrency=16, num_prompts=64, seed=6),
    inferencex_workload(300, 100, request_rate=40.0, num_prompts=64, seed=7),
], ids=["closed", "open"])
def test_replicas_interleave_exactly_as_step_by_step(wl):
    fast = Cluster([eng(), eng()]).run(wl).metrics()
    slow = Cluster([eng(1), eng(1)]).run(wl).metrics()
    assert_same(fast, slow)


def test_two_replicas_share_the_load():
    # two replicas at concurrency 32 behave like one engine at concurrency 16 with half the requests
    wl = inferencex_workload(300, 100, concurrency=32, num_prompts=128, seed=8)
    c = Cluster([eng(), eng()])
    two = c.run(wl).metrics()
    half = run_workload(eng(), inferencex_workload(300, 100, concurrency=16, num_prompts=64, seed=8)).metrics()
    assert two["duration"] == pytest.approx(half["duration"], rel=0.05)
    a, b = (e.stats.tokens_generated for e in c.all)
    assert abs(a - b) < 0.05 * (a + b)


def test_disaggregation_adds_the_kv_transfer_time():
    P, O = 1000, 20
    wl = Workload([P], [O], concurrency=1)
    link = KVLink(latency_s=0.05, bytes_per_s=1e9, bytes_per_token=70_000)
    r = Cluster([eng()], [eng()], link).run(wl)
    o = r.outcomes[0]
    cm = FakeCostModel()
    prefill = cm.step(StepShape.from_lists(prefill=[(P, 0)])).time_s
    transfer = 0.05 + P * 70_000 / 1e9
    assert o.ttft_s == pytest.approx(prefill + transfer, rel=1e-12)
    # then O - 1 decode steps at contexts P+1 .. P+O-1 on the decode worker
    decode = sum(cm.step(StepShape.from_lists(decode_ctx=[P + i])).time_s for i in range(1, O))
    assert o.e2el_s == pytest.approx(prefill + transfer + decode, rel=1e-12)
    assert o.output_tokens == O
    agg = run_workload(eng(), wl).outcomes[0]
    assert o.ttft_s - agg.ttft_s == pytest.approx(transfer, rel=1e-9)


def test_disaggregated_pools_complete_a_loaded_run():
    wl = inferencex_workload(500, 100, concurrency=24, num_prompts=96, seed=9)
    link = KVLink(1e-4, 50e9, 10_000)
    c = Cluster([eng(), eng()], [eng(), eng(), eng()], link)
    r = c.run(wl)
    m = r.metrics()
    assert m["completed"] == 96 and m["total_output_tokens"] == int(wl.output_lens.sum())
    assert all(o.ttft_s <= o.e2el_s for o in r.outcomes)
    assert all(e.block_manager.num_used == 0 for e in c.all)
    assert all(e.stats.tokens_generated > 0 for e in c.decode)
    assert r.itl_counts.sum() == sum(o.output_tokens - 1 for o in r.outcomes)
    assert math.isclose((r.itl_values * r.itl_counts).sum(), sum(o.e2el_s - o.ttft_s for o in r.outcomes), rel_tol=1e-9)


@pytest.mark.parametrize("wl", [
    inferencex_workload(500, 100, concurrency=24, num_prompts=96, seed=9),
    inferencex_workload(500, 100, request_rate=30.0, num_prompts=96, seed=10),
], ids=["closed", "open"])
def test_disaggregated_multi_step_equals_step_by_step(wl):
    link = KVLink(1e-4, 50e9, 10_000)
    fast = Cluster([eng(), eng()], [eng(), eng(), eng()], link).run(wl)
    slow = Cluster([eng(1), eng(1)], [eng(1), eng(1), eng(1)], link).run(wl)
    assert fast.num_steps == slow.num_steps
    assert_same(fast.metrics(), slow.metrics())


def test_kv_handoff_is_paid_once_per_request_without_holding_the_link():
    # two requests prefilled together: each pays handoff + latency + its own bytes; the second transfer waits
    # only for the first one's bytes (the lane), not for its handoff
    P, O, h = 1000, 5, 0.2
    wl = Workload([P, P], [O, O], concurrency=2)
    link = KVLink(latency_s=0.01, bytes_per_s=1e9, bytes_per_token=70_000, handoff_s=h)
    bare = Cluster([eng()], [eng()], KVLink(0.01, 1e9, 70_000)).run(wl)
    r = Cluster([eng()], [eng()], link).run(wl)
    cm = FakeCostModel()
    prefill = cm.step(StepShape.from_lists(prefill=[(P, 0), (P, 0)])).time_s
    wire = P * 70_000 / 1e9
    ttfts = sorted(o.ttft_s for o in r.outcomes)
    assert ttfts[0] == pytest.approx(prefill + wire + 0.01 + h, rel=1e-12)
    assert ttfts[1] == pytest.approx(prefill + 2 * wire + 0.01 + h, rel=1e-12)
    assert [a - b for a, b in zip(ttfts, sorted(o.ttft_s for o in bare.outcomes))] == pytest.approx([h, h])


def test_a_busy_decode_worker_streams_the_first_token_at_the_end_of_its_step_in_progress():
    # two requests prefilled together; the first one's KV lands at T1 and its decode starts there (30 ms steps);
    # the second one's KV lands 70 ms later (its bytes waited for the lane), in the middle of the first one's third
    # decode step: the decode worker's loop sees it (and streams its first token) only when that step ends.
    # Hand count from the fake cost model's step times
    P, O = 1000, 8
    wl = Workload([P, P], [O, O], concurrency=2)
    link = KVLink(latency_s=0.01, bytes_per_s=1e9, bytes_per_token=70_000)
    dec = FakeCostModel(base_s=0.03)
    c = Cluster([eng()], [eng(base_s=0.03)], link)
    r = c.run(wl)
    prefill = FakeCostModel().step(StepShape.from_lists(prefill=[(P, 0), (P, 0)])).time_s
    wire = P * 70_000 / 1e9
    t1 = prefill + 0.01 + wire
    t2 = t1 + wire  # when the second KV lands
    steps = [dec.step(StepShape.from_lists(decode_ctx=[P + i])).time_s for i in (1, 2, 3)]
    assert sum(steps[:2]) < wire < sum(steps)  # it lands during the third step
    ttft = sorted(o.ttft_s for o in r.outcomes)
    assert ttft[0] == pytest.approx(t1, rel=1e-12)
    assert ttft[1] == pytest.approx(t1 + sum(steps), rel=1e-12)
    assert c.step_wait_s_mean() == pytest.approx((t1 + sum(steps) - t2) / 2, rel=1e-9)
    # the same run with the first token at the landing itself (the model before the decode loop was modelled)
    at_landing = Cluster([eng()], [eng(base_s=0.03)], link, first_token_at_step=False).run(wl)
    assert sorted(o.ttft_s for o in at_landing.outcomes)[1] == pytest.approx(t2, rel=1e-12)
    # the wait moves only the first token: both requests finish at the same times
    assert sorted(o.e2el_s for o in r.outcomes) == pytest.approx(sorted(o.e2el_s for o in at_landing.outcomes))


def test_first_token_steps_holds_a_landed_request_for_that_many_decode_loop_iterations():
    # as above, the second KV lands during the first request's third decode step; with first_token_steps = 2 the
    # loop takes it 2 x (the worker's latest decode step: the mean of the run of steps the cluster let it take,
    # between the first and the third step's length) after that step ends: the cluster cuts the decode worker
    # there, i.e. at the end of the step crossing that time (the fifth: steps grow with the context), where its
    # first token is streamed and it joins the batch. Hand count from the fake cost model's step times
    P, O = 1000, 8
    wl = Workload([P, P], [O, O], concurrency=2)
    link = KVLink(latency_s=0.01, bytes_per_s=1e9, bytes_per_token=70_000)
    dec = FakeCostModel(base_s=0.03)
    c = Cluster([eng()], [eng(base_s=0.03)], link, first_token_steps=2)
    r = c.run(wl)
    prefill = FakeCostModel().step(StepShape.from_lists(prefill=[(P, 0), (P, 0)])).time_s
    wire = P * 70_000 / 1e9
    t1 = prefill + 0.01 + wire
    s = [dec.step(StepShape.from_lists(decode_ctx=[P + i])).time_s for i in range(1, 6)]
    assert s[3] < 2 * s[0] and 2 * s[2] < s[3] + s[4]  # whichever mean: the take time falls in the fifth step
    ttft = sorted(o.ttft_s for o in r.outcomes)
    assert ttft[0] == pytest.approx(t1, rel=1e-12)  # landed on an idle worker: no loop iteration to wait for
    assert ttft[1] == pytest.approx(t1 + sum(s), rel=1e-12)
    # its decode starts there: its O - 1 more tokens are O - 1 steps of the two-request batch after the fifth step
    both = [dec.step(StepShape.from_lists(decode_ctx=[P + 6 + i, P + 1 + i])).time_s for i in range(2)]
    assert max(o.e2el_s for o in r.outcomes) > t1 + sum(s) + sum(both)
    # 0 steps is the model without it, to the bit
    zero = Cluster([eng()], [eng(base_s=0.03)], link, first_token_steps=0).run(wl)
    plain = Cluster([eng()], [eng(base_s=0.03)], link).run(wl)
    assert [o.ttft_s for o in zero.outcomes] == [o.ttft_s for o in plain.outcomes]
    with pytest.raises(ValueError, match="first_token_steps must be >= 0"):
        Cluster([eng()], [eng()], link, first_token_steps=-1)


def test_first_token_steps_cost_nothing_when_the_decode_worker_is_idle():
    # one request at a time: every KV lands on an idle decode worker, whose loop turns at once
    P, O = 1000, 4
    wl = Workload([P, P, P], [O, O, O], concurrency=1)
    link = KVLink(latency_s=0.01, bytes_per_s=1e9, bytes_per_token=70_000)
    held = Cluster([eng()], [eng(base_s=0.03)], link, first_token_steps=3).run(wl)
    plain = Cluster([eng()], [eng(base_s=0.03)], link).run(wl)
    assert [o.ttft_s for o in held.outcomes] == [o.ttft_s for o in plain.outcomes]


@pytest.mark.parametrize("full", [
    EngineConfig(max_num_seqs=1, max_num_batched_tokens=2048),  # one sequence slot
    EngineConfig(max_num_seqs=32, max_num_batched_tokens=2048, num_kv_blocks=100),  # KV for one 1000-token prompt
], ids=["slots", "kv"])
def test_a_full_decode_worker_holds_the_next_request_before_its_first_token(full):
    # the decode worker has room for one request: the second prefilled request waits until the first one
    # finishes decoding, then its KV crosses the link; its TTFT includes that wait (hand-computed from the fake
    # cost model's step times)
    P, O = 1000, 6
    wl = Workload([P, P], [O, O], concurrency=2)
    link = KVLink(latency_s=0.01, bytes_per_s=1e9, bytes_per_token=70_000)
    one = Engine(SimBackend(FakeCostModel()), full)
    c = Cluster([eng()], [one], link)
    r = c.run(wl)
    cm = FakeCostModel()
    prefill = cm.step(StepShape.from_lists(prefill=[(P, 0), (P, 0)])).time_s
    hop = 0.01 + P * 70_000 / 1e9
    first_in = prefill + hop
    decode = sum(cm.step(StepShape.from_lists(decode_ctx=[P + i])).time_s for i in range(1, O))
    ttft = sorted(o.ttft_s for o in r.outcomes)
    assert ttft[0] == pytest.approx(first_in, rel=1e-12)
    assert ttft[1] == pytest.approx(first_in + decode + hop, rel=1e-12)  # waited for the slot, then crossed
    assert c.admission_wait_s_mean() == pytest.approx((first_in + decode - prefill) / 2, rel=1e-12)
    # with room for both nothing waits: the two transfers only share the link lane
    both = Cluster([eng()], [eng()], link).run(wl)
    assert sorted(o.ttft_s for o in both.outcomes)[1] == pytest.approx(prefill + hop + P * 70_000 / 1e9, rel=1e-12)


def test_inbound_totals_equal_a_recount_of_the_transfers():
    """The cluster's running totals of KV transfers on their way to each decode worker (count and the blocks
    they pre-allocate) equal a brute-force recount of the transfer heap after every event of a loaded run with
    two decode workers."""
    wl = inferencex_workload(300, 60, concurrency=48, num_prompts=160, seed=12)
    link = KVLink(2e-3, 5e9, 10_000)
    c = Cluster([eng(), eng()], [eng(), eng()], link)
    advance = c.advance
    seen = 0

    def checked(horizon):
        nonlocal seen
        out = advance(horizon)
        for j, d in enumerate(c.decode):
            inbound = [x[2] for x in c._transfers if x[3] == j]
            seen += len(inbound)
            assert c._inbound_n[j] == len(inbound)
            assert c._inbound_blocks[j] == sum(d.block_manager.blocks_for(q.prompt_len + 1) for q in inbound)
        return out

    c.advance = checked
    r = c.run(wl)
    assert len(r.outcomes) == 160 and seen > 0
    assert not any(c._inbound_n) and not any(c._inbound_blocks)


def _decode_picks(seed: int, n: int, workers: int = 2) -> list[int]:
    """The decode workers a random-routing cluster seeded ``seed`` draws for its first ``n`` prefilled requests
    (one prefill worker: no prefill draw), from numpy's documented seeded generator."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [int(rng.integers(workers)) for _ in range(n)]


def test_random_routing_holds_a_request_at_its_own_full_decode_worker_while_another_is_free():
    # two decode workers with one sequence slot each, two requests prefilled together. Least-loaded routing sends
    # them to different workers: nobody waits for a slot. A random router (SGLang's PD router, --decode-policy
    # random) that draws the same worker for both makes the second wait there until the first has finished
    # decoding, although the other worker is free; when its draws differ, nobody waits. Hand count from the fake
    # cost model's step times (as in the one-slot test above)
    P, O = 1000, 6
    wl = Workload([P, P], [O, O], concurrency=2)
    link = KVLink(latency_s=0.01, bytes_per_s=1e9, bytes_per_token=70_000)
    one_slot = EngineConfig(max_num_seqs=1, max_num_batched_tokens=2048)

    def pool():
        return [Engine(SimBackend(FakeCostModel()), one_slot) for _ in range(2)]

    cm = FakeCostModel()
    prefill = cm.step(StepShape.from_lists(prefill=[(P, 0), (P, 0)])).time_s
    wire = P * 70_000 / 1e9
    hop = 0.01 + wire
    first_in = prefill + hop
    decode = sum(cm.step(StepShape.from_lists(decode_ctx=[P + i])).time_s for i in range(1, O))
    same = next(s for s in range(100) if len(set(_decode_picks(s, 2))) == 1)
    apart = next(s for s in range(100) if len(set(_decode_picks(s, 2))) == 2)
    c = Cluster([eng()], pool(), link, routing="random", seed=same)
    ttft = sorted(o.ttft_s for o in c.run(wl).outcomes)
    assert ttft[0] == pytest.approx(first_in, rel=1e-12)
    assert ttft[1] == pytest.approx(first_in + decode + hop, rel=1e-12)  # waited at its own worker
    assert c.admission_wait_s_mean() == pytest.approx((first_in + decode - prefill) / 2, rel=1e-12)
    j = _decode_picks(same, 1)[0]
    assert c.decode[j].stats.tokens_generated > 0 and c.decode[1 - j].stats.tokens_generated == 0
    for cl in (Cluster([eng()], pool(), link, routing="random", seed=apart), Cluster([eng()], pool(), link)):
        ttft = sorted(o.ttft_s for o in cl.run(wl).outcomes)
        assert ttft[1] == pytest.approx(prefill + hop + wire, rel=1e-12)  # only the send lane is shared
        assert cl.admission_wait_s_mean() == 0.0
    with pytest.raises(ValueError, match="routing 'round-robin'"):
        Cluster([eng()], pool(), link, routing="round-robin")


def test_random_routing_at_concurrency_equal_to_the_slots_queues_where_least_loaded_does_not():
    # a closed loop of 8 with 2 decode workers of 4 slots: least-loaded routing always finds the free slot (no
    # admission wait); random routing overfills one worker now and then, so requests wait and TTFT grows; every
    # request still completes and the decode pool never holds more than its slots
    wl = inferencex_workload(300, 40, concurrency=8, num_prompts=96, seed=3)
    link = KVLink(2e-3, 5e9, 10_000)
    four = EngineConfig(max_num_seqs=4, max_num_batched_tokens=2048)

    def run(**kw):
        c = Cluster([eng()], [Engine(SimBackend(FakeCostModel()), four) for _ in range(2)], link, **kw)
        advance, most = c.advance, [0]

        def checked(horizon):
            out = advance(horizon)
            most[0] = max([most[0]] + [c._load(d) + c._inbound_n[j] for j, d in enumerate(c.decode)])
            return out

        c.advance = checked
        return c, c.run(wl), most[0]

    ll, r_ll, _ = run()
    rnd, r_rnd, most = run(routing="random", seed=1)
    assert len(r_ll.outcomes) == len(r_rnd.outcomes) == 96
    assert ll.admission_wait_s_mean() == 0.0 < rnd.admission_wait_s_mean()
    assert r_rnd.metrics()["mean_ttft_ms"] > r_ll.metrics()["mean_ttft_ms"]
    assert most == 4  # full at times, never over its slots
    assert not rnd.busy() and not any(rnd._handoffs_to)
