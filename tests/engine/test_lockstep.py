"""The lockstep decode group (lazily advanced decode counters, simulation only) is an optimisation only.

With the group on, every step — shapes, multi-step lengths, preemptions, timings — and every sequence's
counters after every step equal the per-sequence walk with the group off (``scheduler.group = None``),
exactly: same integer decisions, same float operations in the same order.
"""

import pytest
from jalapeno.testing.engine_fakes import FakeCostModel

from jalapeno.sim.backend import SimBackend, Speculation
from jalapeno.engine import Engine, EngineConfig
from jalapeno.sim.cluster import Cluster
from jalapeno.engine.sequence import SamplingParams, SeqStatus
from jalapeno.workload import inferencex_workload
from jalapeno.sim.client import run_workload


def engine(*, lockstep, max_steps=1 << 30, kv_tokens=1 << 20, k=0, spec=None, max_num_seqs=48, cls=Engine,
           backend=SimBackend):
    b = backend(FakeCostModel(kv_tokens=kv_tokens), speculation=spec, keep_trace=True)
    b.max_multi_step = max_steps
    cfg = EngineConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=2048, block_size=16, num_speculative_tokens=k)
    e = cls(b, cfg)
    if not lockstep:
        e.scheduler.group = None
    return e


def snapshot(e):
    """Every running and waiting sequence's counters, and the engine's, as plain values."""
    s = e.scheduler

    def row(q):
        return (q.user_data.chain, q.user_data.index, q.status.value, q.num_output_tokens, q.num_computed_tokens,
                q.num_blocks, q.last_token_s, q.first_token_s, q.num_preemptions)

    return ([row(q) for q in s.running], [row(q) for q in s.waiting], e.block_manager.num_free, e.clock.now(),
            e.num_steps, e.tokens_generated, e.prompt_tokens_computed, e.energy_j)


class RecordingEngine(Engine):
    """Snapshots after every step (a subclass: instrumenting works the same on the native build, where an
    engine's methods cannot be replaced on the instance)."""

    snaps: list
    grouped: int

    def step_finished(self):
        done = super().step_finished()
        self.grouped += self.scheduler.num_grouped > 0
        self.snaps.append(snapshot(self))
        return done


def run(wl, *, lockstep, **kw):
    """Run ``wl``; returns the result, the backend trace, the engine, every step's snapshot and how many
    steps had group members at the head of the batch."""
    e = engine(lockstep=lockstep, cls=RecordingEngine, **kw)
    e.snaps, e.grouped = [], 0
    r = run_workload(e, wl)
    assert e.snaps  # the recording ran
    return r, e.backend.trace, e, e.snaps, e.grouped


def outcomes(r):
    return [(o.start_s, o.ttft_s, o.e2el_s, o.output_tokens) for o in r.outcomes]


CASES = {
    # ~48 sequences of up to ~1.3k tokens in 2,400 KV tokens: preemption by recompute all the time
    "kv-starved closed loop": dict(wl=inferencex_workload(400, 900, concurrency=48, num_prompts=150, seed=5),
                                   kv_tokens=150 * 16),
    "poisson": dict(wl=inferencex_workload(300, 300, request_rate=60.0, num_prompts=150, seed=6)),
    "poisson, kv-starved": dict(wl=inferencex_workload(300, 600, request_rate=40.0, num_prompts=120, seed=9),
                                kv_tokens=90 * 16),
    "kv-starved step by step": dict(wl=inferencex_workload(300, 400, concurrency=32, num_prompts=80, seed=7),
                                    kv_tokens=60 * 16, max_steps=1),
    "chains": dict(wl=inferencex_workload(200, 150, request_rate=30.0, num_prompts=60, max_concurrency=8,
                                          chain_calls=3, seed=3), kv_tokens=80 * 16),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_lazy_counters_equal_eager_ones(case):
    kw = CASES[case]
    r0, t0, e0, s0, g0 = run(lockstep=False, **kw)
    r1, t1, e1, s1, g1 = run(lockstep=True, **kw)
    assert g0 == 0 and g1 > len(t1) // 4  # the group really carried the batch, often
    assert len(s1) == len(s0)
    for i, (a, b) in enumerate(zip(s0, s1)):
        assert a == b, f"step {i} differs"
    assert t1 == t0  # every batch: steps run, prefill tokens, decode sequences, context sums, durations, energy
    assert e1.stats == e0.stats
    assert outcomes(r1) == outcomes(r0)  # same completions, in the same order
    assert (r1.itl_values.tolist(), r1.itl_counts.tolist()) == (r0.itl_values.tolist(), r0.itl_counts.tolist())
    if "starved" in case:
        assert e0.stats.num_preemptions > 0


def test_speculative_decoding_walks_every_sequence():
    # each sequence gains its own number of tokens per step: no lockstep group
    e = engine(lockstep=True, k=2, spec=Speculation("ngram", 2, (0.8, 0.5)))
    assert e.scheduler.group is None


def test_data_parallel_cluster_equals_eager():
    wl = inferencex_workload(200, 200, concurrency=12, num_prompts=24, seed=11)

    def go(lockstep):
        es = [engine(lockstep=lockstep, kv_tokens=30 * 16) for _ in range(2)]
        r = Cluster(es).run(wl)
        return outcomes(r), [x.backend.trace for x in es], [x.stats for x in es]

    on, off = go(True), go(False)
    assert on == off
    assert all(st.num_preemptions > 0 for st in on[2])  # KV-starved replicas: preemptions inside the group


def test_members_counters_are_read_only_and_written_back_on_release():
    e = engine(lockstep=True, max_steps=1)
    for i in range(6):
        e.add_request(prompt_len=40 + i, sampling=SamplingParams(max_tokens=60))
    for _ in range(5):
        e.step_finished()
    g = e.scheduler.group
    assert len(g) == 6 and list(g.members) == e.scheduler.running
    seq = e.scheduler.running[2]
    before = (seq.num_output_tokens, seq.num_computed_tokens, seq.num_blocks, seq.last_token_s)
    assert before[1] == seq.prompt_len + before[0] - 1
    assert before[2] == -(-before[1] // 16)
    with pytest.raises(RuntimeError, match="lockstep"):
        seq.num_output_tokens = 3
    e.step_finished()
    assert seq.num_output_tokens == before[0] + 1 and seq.last_token_s == e.clock.now()
    g.release(seq)
    assert seq.group is None and seq.num_output_tokens == before[0] + 1 and seq.num_blocks == -(-seq.num_computed_tokens // 16)


def test_abort_dissolves_the_group():
    e = engine(lockstep=True, max_steps=1, max_num_seqs=8)
    for i in range(8):
        e.add_request(prompt_len=200 + i, sampling=SamplingParams(max_tokens=100 + 10 * i))
    for _ in range(5):
        e.step_finished()
    assert len(e.scheduler.group) == 8
    victim = e.scheduler.running[3]
    assert e.abort(victim.seq_id)
    assert len(e.scheduler.group) == 0 and victim.status is SeqStatus.FINISHED
    done = []
    while e.has_unfinished():
        done += e.step_finished()
    assert sorted(s.num_output_tokens for s in done) == [100 + 10 * i for i in range(8) if i != 3]
    assert e.stats.kv_blocks_used == 0


def test_step_with_outputs_matches_step_finished():
    # step() reports every request each step, so it runs without the group; mixing both stays exact
    def go(mixed):
        e = engine(lockstep=True, max_steps=4, kv_tokens=30 * 16, max_num_seqs=8)
        for i in range(10):
            e.add_request(prompt_len=50 + 7 * i, sampling=SamplingParams(max_tokens=80 + 5 * i), request_id=i)
        fin, n = [], 0
        while e.has_unfinished():
            if mixed and n % 3 == 0:
                fin += [o.seq_id for o in e.step() if o.finished]
            else:
                fin += [s.seq_id for s in e.step_finished()]
            n += 1
        return fin, e.stats

    assert go(True) == go(False)


@pytest.mark.parametrize("extra_blocks", [False, True], ids=["slacks below a block", "some hold spare blocks"])
def test_multi_step_length_is_the_largest_that_fits(extra_blocks):
    # a decode-only batch, some sequences in the group and some not; its multi-step length must be the largest
    # K whose KV blocks fit, by brute force over K (each sequence holds ceil((start + K) / bs) blocks for K steps)
    import random

    from jalapeno.engine.block_manager import BlockManager
    from jalapeno.engine.scheduler import Scheduler
    from jalapeno.engine.sequence import Sequence

    rng = random.Random(1)
    bs = 16
    group_only = 0  # trials whose batch is the group alone (the scheduler's own path for it)
    for trial in range(60):
        n = rng.randint(1, 12)
        seqs = []
        for i in range(n):
            s = Sequence(prompt_len=rng.randint(1, 90), sampling=SamplingParams(max_tokens=400), arrival_s=0.0)
            s.status = SeqStatus.RUNNING
            s.num_output_tokens = rng.randint(1, 50)
            s.num_computed_tokens = s.num_tokens - 1
            s.num_blocks = -(-s.num_computed_tokens // bs) + (extra_blocks and rng.random() < 0.3) * rng.randint(1, 3)
            s.last_token_s = 0.0
            seqs.append(s)
        held = sum(s.num_blocks for s in seqs)
        bm = BlockManager(held + rng.randint(n, 6 * n), bs, track_ids=False)
        bm.num_free -= held
        sched = Scheduler(EngineConfig(block_size=bs, max_num_seqs=16, max_num_batched_tokens=512), bm)
        for s in seqs[: rng.randint(0, n)]:  # the group is a prefix of `running` (joined oldest first)
            if s.num_blocks != -(-s.num_computed_tokens // bs):
                break  # holds a spare block: only exact holders join
            sched.group.join(s, s.max_tokens)
        sched.running.extend(seqs)
        starts = [s.num_computed_tokens for s in seqs]
        blocks = [s.num_blocks for s in seqs]
        free = bm.num_free

        def fits(k):
            return sum(max(0, -(-(st + k) // bs) - b) for st, b in zip(starts, blocks)) <= free

        assert fits(1), trial
        expected = max(k for k in range(1, 400) if fits(k))
        batch = sched.schedule(max_steps=1 << 30)
        assert batch.num_steps == min(expected, 400 - max(s.num_output_tokens for s in seqs)), trial
        assert [c.seq for c in batch.chunks] == seqs
        assert sum(s.num_blocks for s in seqs) == held + (free - bm.num_free)
        for s, st in zip(seqs, starts):
            assert s.num_blocks >= -(-(st + batch.num_steps) // bs)
        group_only += batch.num_grouped == n
    assert group_only >= (5 if not extra_blocks else 0)


@pytest.mark.parametrize("window", [40, 300, 5000])
def test_sliding_window_shapes_equal_the_walk(window):
    # a sliding-window model: the group gives its members' windowed context sums without a walk; every step's
    # shape (first and next step) equals the per-sequence walk's, and both equal a brute-force count
    from types import SimpleNamespace

    shapes = []

    class Recording(SimBackend):  # a subclass: the native build's backend methods cannot be replaced per instance
        def _shapes(self, batch, multi):
            first, nxt = super()._shapes(batch, multi)
            dec = batch.chunks[: batch.num_decodes]
            ctx = [c.start + c.num_tokens for c in dec]
            assert first.decode_ctx_sum_window == sum(min(x, window) for x in ctx)
            assert first.decode_below_window == sum(x < window for x in ctx)
            shapes.append((first, nxt))
            return first, nxt

    def go(lockstep):
        shapes.clear()
        e = engine(lockstep=lockstep, kv_tokens=120 * 16, backend=Recording)
        b = e.backend
        b.cm.model = SimpleNamespace(sliding_window=window, num_layers=4)
        b.window = window
        r = run_workload(e, inferencex_workload(300, 400, concurrency=40, num_prompts=120, seed=4))
        return list(shapes), outcomes(r), e.scheduler.num_preemptions

    off, on = go(False), go(True)
    assert on == off
    assert on[2] > 0  # preemptions inside the group too
    assert any(s[1] is not None for s in on[0])  # multi-step batches that prefill first: the next-step sums


def test_window_sums_follow_joins_steps_and_releases():
    import random

    from jalapeno.engine.lockstep import DecodeGroup
    from jalapeno.engine.sequence import Sequence

    rng = random.Random(3)
    g = DecodeGroup(16)
    live = []
    for step in range(300):
        if rng.random() < 0.5:
            s = Sequence(None, SamplingParams(max_tokens=10_000), prompt_len=rng.randrange(1, 200))
            s.num_output_tokens = 1
            s.num_computed_tokens = s.prompt_len
            s.num_blocks = -(-s.prompt_len // 16)
            s.last_token_s = g.t_last
            g.join(s, 10_000)
            live.append(s)
        if live and rng.random() < 0.2:
            g.release(live.pop(rng.randrange(len(live))))
        g.ahead = 1
        g.advance(1, g.t_last)
        for w, shift in ((150, 1), (150, 2)) if step < 299 else ((260, 1), (260, 2)):  # then a rebuilt index
            ctx = [s.num_computed_tokens + shift for s in live]
            assert g.window_sums(w, shift) == (sum(min(c, w) for c in ctx), sum(c < w for c in ctx))
        w = 150 if step < 299 else 260
        ctx1, ctx2 = ([s.num_computed_tokens + k for s in live] for k in (1, 2))
        assert g.window_sums_pair(w, 1) == (sum(min(c, w) for c in ctx1), sum(c < w for c in ctx1),
                                           sum(min(c, w) for c in ctx2), sum(c < w for c in ctx2))


def test_chunk_list_equals_the_members_through_joins_leaves_and_lending():
    """The group's chunk list (kept across steps, lent to each batch) equals a fresh list of its members'
    chunks after any sequence of joins, releases in any order, lending with a tail appended, releases while
    lent (finishes) and a batch deleting a preempted member's chunk (then it is rebuilt)."""
    import random

    from jalapeno.engine.batch import SeqChunk
    from jalapeno.engine.lockstep import DecodeGroup
    from jalapeno.engine.sequence import Sequence

    rng = random.Random(11)
    g = DecodeGroup(16)
    live: list = []
    lent = told = None
    kept = 0
    for _ in range(2000):
        r = rng.random()
        if r < 0.35:
            s = Sequence(None, SamplingParams(max_tokens=10_000), prompt_len=rng.randrange(1, 200))
            s.num_output_tokens = 1
            s.num_computed_tokens = s.prompt_len
            s.num_blocks = -(-s.prompt_len // 16)
            s.last_token_s = g.t_last
            g.join(s, 10_000)
            live.append(s)
            lent = None  # a join takes the list back
        elif r < 0.6 and live:  # a member leaves: usually the oldest, else any
            i = 0 if rng.random() < 0.5 else rng.randrange(len(live))
            g.release(live.pop(i))
        elif r < 0.65 and live and lent is not None:  # the batch drops a preempted member's chunk, then it goes
            victim = live.pop()
            j = next(k for k, c in enumerate(lent) if c.seq is victim)
            del lent[j]
            if rng.random() < 0.7:  # told (the scheduler's way): the list keeps in step, not rebuilt
                g.chunk_deleted(victim, j)
                told = lent
            g.release(victim)
        else:  # a new batch: the members' chunks, in join order, with other chunks appended behind
            lent = g.chunks()
            if told is not None:
                kept += lent is told
                told = None
            assert [c.seq for c in lent] == live
            assert lent == list(g.members.values())
            tail = Sequence(None, SamplingParams(max_tokens=4), prompt_len=5)
            lent.extend(SeqChunk(tail, 0, 5, True) for _ in range(rng.randrange(3)))
    assert [c.seq for c in g.chunks()] == live
    assert kept > 10  # a told deletion kept the list (no rebuild)


def _join_a_random_prompt(g, rng, bs: int, live: list, max_prompt: int) -> None:
    """A sequence whose prompt (1 .. max_prompt - 1 tokens) is computed and its first token out joins the decode
    group ``g`` (blocks of ``bs``) with 10,000 tokens left, and ``live`` (the test's own member list)."""
    from jalapeno.engine.sequence import Sequence

    s = Sequence(None, SamplingParams(max_tokens=10_000), prompt_len=rng.randrange(1, max_prompt))
    s.num_output_tokens = 1
    s.num_computed_tokens = s.prompt_len
    s.num_blocks = -(-s.prompt_len // bs)
    s.last_token_s = g.t_last
    g.join(s, 10_000)
    live.append(s)


@pytest.mark.parametrize("bs", [16, 64, 1])
def test_blocks_for_equals_a_count_over_the_members(bs):
    """``DecodeGroup.blocks_for(extra)`` (one pass over the phases) and with the caller's ``slack_counts()``
    both equal Σ over members of the new blocks ``extra`` more tokens need, counted member by member, through
    joins, releases, steps and look-aheads."""
    import random

    from jalapeno.engine.lockstep import DecodeGroup

    rng = random.Random(19)
    g = DecodeGroup(bs)
    live: list = []
    for _ in range(400):
        if rng.random() < 0.6:
            g.ahead = 0
            _join_a_random_prompt(g, rng, bs, live, 200)
        if live and rng.random() < 0.2:
            g.release(live.pop(rng.randrange(len(live))))
        g.ahead = rng.randrange(0, 5 * bs)
        for extra in (0, 1, 3, bs - 1, bs, bs + 1, 2 * bs + 7, 40):
            held = g.ahead
            want = sum(-(-(s.num_computed_tokens + held + extra) // bs) - -(-(s.num_computed_tokens + held) // bs)
                       for s in live)
            assert g.blocks_for(extra) == want == g.blocks_for(extra, g.slack_counts())
        g.advance(1, g.t_last)


@pytest.mark.parametrize("bs", [16, 64, 1])
def test_trim_frees_the_look_ahead_blocks_counted_member_by_member(bs):
    """``DecodeGroup.trim()`` (a sum over the look-ahead's remainder of phases) frees exactly the blocks each
    member holds beyond its computed tokens, counted member by member (ceil((comp + ahead)/bs) − ceil(comp/bs)),
    through joins, releases and steps, for look-aheads below, at and above a block."""
    import random

    from jalapeno.engine.lockstep import DecodeGroup

    rng = random.Random(23)
    g = DecodeGroup(bs)
    live: list = []
    for _ in range(400):
        g.ahead = 0
        if rng.random() < 0.6:
            _join_a_random_prompt(g, rng, bs, live, 300)
        if live and rng.random() < 0.2:
            g.release(live.pop(rng.randrange(len(live))))
        g.ahead = rng.choice([0, 1, bs - 1, bs, bs + 1, rng.randrange(1, 4 * bs)])
        held = g.ahead
        want = sum(-(-(s.num_computed_tokens + held) // bs) - -(-s.num_computed_tokens // bs) for s in live)
        assert g.trim() == want
        assert g.ahead == 0
        g.advance(rng.randrange(0, 3), g.t_last)


@pytest.mark.parametrize("bs", [16, 64])
def test_slack_cut_equals_the_sorted_slack_walk(bs):
    """``DecodeGroup.slack_cut(rem, extra)`` (slacks walked in ascending order from the phase counts) equals the
    walk it replaced in ``Scheduler._multi_step``: the members' ``slack_counts()`` merged with the other chunks'
    slacks, sorted, and the first slack at which the running count passes ``rem``."""
    import random

    from jalapeno.engine.lockstep import DecodeGroup

    rng = random.Random(29)
    g = DecodeGroup(bs)
    live: list = []
    for _ in range(300):
        g.ahead = 0
        if rng.random() < 0.6:
            _join_a_random_prompt(g, rng, bs, live, 300)
        if len(live) > 1 and rng.random() < 0.2:
            g.release(live.pop(rng.randrange(len(live))))
        g.ahead = rng.randrange(0, 3 * bs)
        extra = {rng.randrange(bs): rng.randrange(1, 4) for _ in range(rng.randrange(3))}
        counts = dict(g.slack_counts())
        for sl, c in extra.items():
            counts[sl] = counts.get(sl, 0) + c
        n = sum(counts.values())
        for rem in {0, n // 2, n - 1, rng.randrange(n)}:
            taken = 0
            for sl, cnt in sorted(counts.items()):
                if taken + cnt > rem:
                    break
                taken += cnt
            assert g.slack_cut(rem, extra) == sl
        g.advance(rng.randrange(0, 3), g.t_last)


def test_steps_left_equals_the_fewest_steps_over_the_members():
    """``DecodeGroup.steps_left()`` (kept between events, forgotten when the member finishing first leaves)
    equals min over members of (their limit − their output tokens), counted member by member, through joins of
    members with any limit (earlier and later than the current first), releases of the first and of others, and
    steps that finish members."""
    import random

    from jalapeno.engine.lockstep import DecodeGroup
    from jalapeno.engine.sequence import Sequence

    rng = random.Random(23)
    g = DecodeGroup(16)
    live: dict = {}  # member -> its limit
    finished = released = 0
    for _ in range(600):
        if rng.random() < 0.6 or not live:
            g.ahead = 0
            s = Sequence(None, SamplingParams(max_tokens=10_000), prompt_len=rng.randrange(1, 200))
            s.num_output_tokens = 1
            s.num_computed_tokens = s.prompt_len
            s.num_blocks = -(-s.prompt_len // 16)
            s.last_token_s = g.t_last
            limit = rng.randrange(2, 40)
            g.join(s, limit)
            live[s] = limit
        if live and rng.random() < 0.3:
            if rng.random() < 0.5:  # the member that finishes first (what the kept value refers to)
                s = min(live, key=lambda m: live[m] - m.num_output_tokens)
            else:
                s = rng.choice(list(live))
            g.release(s)
            del live[s]
            released += 1
        if not live:
            continue
        want = min(limit - s.num_output_tokens for s, limit in live.items())
        assert g.steps_left() == want
        step = rng.randrange(1, want + 1)  # never past a member's last token
        g.ahead = step
        for s in g.advance(step, g.t_last):
            assert s.num_output_tokens == live.pop(s)
            finished += 1
    assert finished > 50 and released > 50


@pytest.mark.parametrize("seed,conc,kv_blocks", [(31, 96, 400), (32, 128, 520), (33, 64, 260), (34, 120, 330)])
def test_crossing_members_served_in_bulk_equal_the_walk(seed, conc, kv_blocks):
    """Closed loops starved of KV blocks with many group members crossing into a new block at once (the group
    serves the crossers left after a preemption in one count when none of them was preempted): every step's
    snapshot, batch and outcome equal the per-sequence walk's."""
    wl = inferencex_workload(300, 700, concurrency=conc, num_prompts=3 * conc, seed=seed)
    kw = dict(kv_tokens=kv_blocks * 16, max_num_seqs=conc)
    r0, t0, e0, s0, _ = run(wl, lockstep=False, **kw)
    r1, t1, e1, s1, g1 = run(wl, lockstep=True, **kw)
    assert e0.stats.num_preemptions > conc and g1 > len(t1) // 4
    assert s1 == s0 and t1 == t0 and e1.stats == e0.stats
    assert outcomes(r1) == outcomes(r0)


@pytest.mark.parametrize("bs", [16, 64, 1])
def test_blocks_for_after_slack_cut_equals_a_count_over_the_members(bs):
    """``blocks_for(extra)`` right after ``slack_cut(rem)`` (which it may read instead of walking the same phases
    again), and after joins, releases and steps in between, equals Σ over members of the new blocks ``extra`` more
    tokens need, counted member by member — for ``extra`` at the cut (as ``Scheduler._multi_step`` asks) and at
    other offsets."""
    import random

    from jalapeno.engine.lockstep import DecodeGroup

    rng = random.Random(37)
    g = DecodeGroup(bs)
    live: list = []

    def want(extra: int) -> int:
        held = g.ahead
        return sum(-(-(s.num_computed_tokens + held + extra) // bs) - -(-(s.num_computed_tokens + held) // bs)
                   for s in live)

    hits = 0
    for _ in range(400):
        g.ahead = 0
        if rng.random() < 0.6 or not live:
            _join_a_random_prompt(g, rng, bs, live, 300)
        if len(live) > 1 and rng.random() < 0.2:
            g.release(live.pop(rng.randrange(len(live))))
        g.ahead = rng.randrange(0, 3 * bs) if rng.random() < 0.5 else 0
        n = len(live)
        rem = rng.randrange(n)
        cut = g.slack_cut(rem)
        rounds = rng.randrange(0, 3)
        for extra in (rounds * bs + cut, cut, rounds * bs + (cut + 1) % bs, 1, bs):
            hits += extra % bs == cut
            assert g.blocks_for(extra) == want(extra)
        if rng.random() < 0.4:  # a member joins or leaves between the cut and the count (steps + ahead kept)
            if rng.random() < 0.5 and n > 1:
                g.release(live.pop(rng.randrange(n)))
            elif g.ahead == 0:
                _join_a_random_prompt(g, rng, bs, live, 300)
            assert g.blocks_for(rounds * bs + cut) == want(rounds * bs + cut)
        g.advance(rng.randrange(0, 3), g.t_last)
    assert hits > 400
