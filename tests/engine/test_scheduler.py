"""Scheduler policy through the engine: token budget, chunked prefill, decode-first, preemption, abort."""

import pytest
from jalapeno.testing.engine_fakes import FakeCostModel, TokenBackend

from jalapeno.sim.backend import SimBackend
from jalapeno.engine import Engine, EngineConfig, SamplingParams, VirtualClock
from jalapeno.errors import CapacityError, ConfigError, RequestError


def engine(cfg, **kw):
    b = TokenBackend(**kw)
    return Engine(b, cfg, clock=VirtualClock()), b


def drain(e, limit=100000):
    outs = []
    for _ in range(limit):
        if not e.has_unfinished():
            return outs
        outs.extend(e.step())
    raise AssertionError("engine did not finish")


def test_chunked_prefill_splits_prompt_under_budget():
    e, b = engine(EngineConfig(max_num_seqs=1, max_num_batched_tokens=32))
    e.add_request(list(range(100)), SamplingParams(max_tokens=3), request_id="a")
    drain(e)
    chunks = [bt[0] for bt in b.batches]
    assert [(s, n, smp) for _, s, n, smp in chunks[:4]] == [(0, 32, False), (32, 32, False), (64, 32, False), (96, 4, True)]
    # then decodes of one token each, starting at the newest token
    assert [(s, n) for _, s, n, _ in chunks[4:]] == [(100, 1), (101, 1)]


def test_budget_and_max_seqs_respected_and_decode_first():
    cfg = EngineConfig(max_num_seqs=4, max_num_batched_tokens=64)
    e, b = engine(cfg)
    for i in range(10):
        e.add_request(list(range(50 + i)), SamplingParams(max_tokens=5), request_id=i)
    outs = drain(e)
    assert sum(o.num_new_tokens for o in outs) == 50
    running_before: set = set()
    for batch in b.batches:
        assert sum(n for _, _, n, _ in batch) <= 64
        assert len({sid for sid, *_ in batch}) <= 4
        decodes = [i for i, (sid, s, n, smp) in enumerate(batch) if n == 1 and sid in running_before and smp]
        # every decode chunk comes before every prefill chunk
        prefills = [i for i, (sid, s, n, smp) in enumerate(batch) if i not in decodes]
        if decodes and prefills:
            assert max(decodes) < min(prefills)
        running_before |= {sid for sid, s, n, smp in batch if smp}


def test_running_decodes_are_never_starved_by_prefill():
    e, b = engine(EngineConfig(max_num_seqs=8, max_num_batched_tokens=16))
    e.add_request(list(range(4)), SamplingParams(max_tokens=20), request_id="d")
    e.step()  # prefill of "d"
    e.add_request(list(range(200)), SamplingParams(max_tokens=2), request_id="p")
    for _ in range(5):
        e.step()
        last = b.batches[-1]
        assert last[0][0] == "d" and last[0][2] == 1  # the decode goes first, every step
        assert sum(n for *_, n, _ in last) <= 16


def test_preemption_by_recompute_completes_every_request():
    # 12 blocks of 4 tokens = 48 KV tokens; 4 requests of 10 + 20 tokens each cannot all fit at once
    e, b = engine(EngineConfig(block_size=4, max_num_seqs=4, max_num_batched_tokens=64), num_blocks=12)
    for i in range(4):
        e.add_request(list(range(10)), SamplingParams(max_tokens=20), request_id=i)
    outs = drain(e)
    assert e.stats.num_preemptions > 0
    got = {}
    for o in outs:
        got.setdefault(o.seq_id, []).extend(o.new_token_ids)
    # every request got exactly its 20 tokens: those of positions 10..29 (a recompute continues where it was)
    assert all(got[i] == [1000 + p for p in range(10, 30)] for i in range(4))
    assert e.block_manager.num_used == 0
    # a preempted sequence is prefilled again from position 0 over prompt + output so far
    restarts = [(sid, n) for bt in b.batches for sid, s, n, smp in bt if s == 0 and n > 10]
    assert restarts, "expected a recompute prefill longer than the prompt"


def test_abort_frees_blocks_at_once():
    e, b = engine(EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096), num_blocks=4000)
    for i in range(200):
        e.add_request(list(range(30)), SamplingParams(max_tokens=50), request_id=i)
    for _ in range(5):
        e.step()
    assert e.stats.kv_blocks_used > 0 and e.stats.running == 64
    for i in range(200):
        assert e.abort(i)
    assert e.stats.kv_blocks_used == 0 and not e.has_unfinished()
    assert not e.abort(0)  # already gone
    assert e.step() == []
    assert set(b.freed) == set(range(200))


def test_stop_token_finishes_with_reason_stop():
    e, _ = engine(EngineConfig(), next_token=lambda s, pos: 7 if pos == 13 else 5)
    e.add_request(list(range(10)), SamplingParams(max_tokens=50, stop_token_ids=(7,)), request_id="x")
    outs = drain(e)
    assert outs[-1].finished and outs[-1].finish_reason == "stop" and outs[-1].num_output_tokens == 4
    e.add_request(list(range(10)), SamplingParams(max_tokens=6, stop_token_ids=(7,), ignore_eos=True), request_id="y")
    outs = drain(e)
    assert outs[-1].finish_reason == "length" and outs[-1].num_output_tokens == 6


def test_prefix_caching_skips_shared_prompt_blocks():
    e, b = engine(EngineConfig(block_size=4, enable_prefix_caching=True))
    e.add_request(list(range(40)), SamplingParams(max_tokens=2), request_id="a")
    drain(e)
    e.add_request(list(range(40)) + [1, 2, 3], SamplingParams(max_tokens=2), request_id="b")
    drain(e)
    first_b = [c for bt in b.batches for c in bt if c[0] == "b"][0]
    assert first_b[1] == 40 and first_b[2] == 3  # only the 3 new tokens are prefilled
    assert e.block_manager.prefix_hits == 40


def test_bad_requests_and_configs_raise_user_errors():
    e, _ = engine(EngineConfig(max_model_len=64), num_blocks=10)
    with pytest.raises(RequestError):
        e.add_request(list(range(64)))
    with pytest.raises(RequestError):
        SamplingParams(max_tokens=0)
    small, _ = engine(EngineConfig(), num_blocks=2)  # 32 KV tokens
    with pytest.raises(CapacityError):
        small.add_request(list(range(40)), request_id="too-big")
    with pytest.raises(ConfigError):
        EngineConfig(max_num_seqs=512, max_num_batched_tokens=256)


def test_multi_step_reserves_blocks_and_never_overruns_kv():
    cm = FakeCostModel(kv_tokens=64 * 16)
    e = Engine(SimBackend(cm), EngineConfig(max_num_seqs=8, max_num_batched_tokens=512))
    for i in range(8):
        e.add_request(prompt_len=30, sampling=SamplingParams(max_tokens=200, ignore_eos=True), request_id=i)
    seen = 0
    while e.has_unfinished():
        e.step()
        used = e.block_manager.num_used
        assert 0 <= used <= 64
        for s in e.scheduler.running:
            assert s.num_blocks * 16 >= s.num_computed_tokens
        seen += 1
    assert e.stats.tokens_generated == 8 * 200
    assert e.block_manager.num_used == 0


def test_a_sequence_that_outgrows_the_kv_cache_finishes_at_its_capacity():
    # 4 blocks × 16 = 64 KV tokens; asking for 500 tokens must end (reason length), not loop forever
    e, _ = engine(EngineConfig(max_num_seqs=2, max_num_batched_tokens=64), num_blocks=4)
    e.add_request(list(range(10)), SamplingParams(max_tokens=500), request_id="long")
    outs = drain(e, limit=1000)
    assert outs[-1].finished and outs[-1].finish_reason == "length"
    assert 10 + outs[-1].num_output_tokens == 64 and e.block_manager.num_used == 0
