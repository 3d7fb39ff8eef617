"""The scheduler's decode hint (the engine prepares the next step's decode walk while it applies a step) is an
optimisation only: with hints on, every step — shapes, multi-step lengths, preemptions, timings — equals the
full per-sequence walk, exactly (same integer decisions, same float operations in the same order)."""

import pytest
from engine_fakes import FakeCostModel

from jalapeno.backends.sim import SimBackend, SpecDecode
from jalapeno.engine import Engine, EngineConfig
from jalapeno.engine.sequence import SamplingParams
from jalapeno.workload import inferencex_workload


def run(wl, *, hints, max_steps=1 << 30, kv_tokens=1 << 20, k=0, spec=None):
    b = SimBackend(FakeCostModel(kv_tokens=kv_tokens), spec=spec, keep_trace=True)
    b.max_multi_step = max_steps
    e = Engine(b, EngineConfig(max_num_seqs=48, max_num_batched_tokens=2048, block_size=16, num_speculative_tokens=k))
    e.scheduler.use_hints = hints
    used = 0
    schedule = e.scheduler.schedule

    def counting(max_steps=1):
        nonlocal used
        h = e.scheduler.hint
        used += h is not None and len(h.chunks) == len(e.scheduler.running)
        return schedule(max_steps)

    e.scheduler.schedule = counting
    r = e.run(wl)
    return r, b.trace, e, used


def outcomes(r):
    return sorted((o.start_s, o.ttft_s, o.e2el_s, o.output_tokens) for o in r.outcomes)


CASES = {
    # ~48 sequences of up to ~1.3k tokens in 2,400 KV tokens: preemption by recompute all the time
    "kv-starved closed loop": dict(wl=inferencex_workload(400, 900, concurrency=48, num_prompts=150, seed=5),
                                   kv_tokens=150 * 16),
    "poisson": dict(wl=inferencex_workload(300, 300, request_rate=60.0, num_prompts=150, seed=6)),
    "kv-starved step by step": dict(wl=inferencex_workload(300, 400, concurrency=32, num_prompts=80, seed=7),
                                    kv_tokens=60 * 16, max_steps=1),
    "spec decode, kv-starved": dict(wl=inferencex_workload(300, 500, concurrency=32, num_prompts=80, seed=8),
                                    kv_tokens=90 * 16, k=2, spec=SpecDecode("ngram", 2, (0.8, 0.5))),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_hints_change_nothing(case):
    kw = CASES[case]
    r0, t0, e0, used0 = run(hints=False, **kw)
    r1, t1, e1, used1 = run(hints=True, **kw)
    assert used0 == 0 and used1 > len(t1) // 4  # the fast walk really ran, often
    assert t1 == t0  # every batch: steps run, prefill tokens, decode sequences, context sums, durations, energy
    assert e1.stats == e0.stats
    assert outcomes(r1) == outcomes(r0)
    assert (r1.itl_values.tolist(), r1.itl_counts.tolist()) == (r0.itl_values.tolist(), r0.itl_counts.tolist())
    if "starved" in case:
        assert e0.stats.num_preemptions > 0


def test_a_hint_is_dropped_when_the_batch_changes_outside_the_scheduler():
    b = SimBackend(FakeCostModel())
    b.max_multi_step = 1  # one step at a time, so all 8 are still running when the first hint appears
    e = Engine(b, EngineConfig(max_num_seqs=8, max_num_batched_tokens=512))
    for i in range(8):
        e.add_request(prompt_len=200 + i, sampling=SamplingParams(max_tokens=100 + 10 * i))
    for _ in range(20):
        e.step_finished()
        if e.scheduler.hint is not None:
            break
    assert e.scheduler.hint is not None and len(e.scheduler.running) == 8
    victim = e.scheduler.running[3]
    assert e.abort(victim.seq_id)
    assert e.scheduler.hint is None  # the next step walks the whole batch again
    done = []
    while e.has_unfinished():
        done += e.step_finished()
    assert sorted(s.num_output_tokens for s in done) == [100 + 10 * i for i in range(8) if i != 3]
    assert e.stats.kv_blocks_used == 0
