"""The per-request path of a simulated cluster (issue #17 item 8): each shortcut equals the plain way it replaced.

Every test runs a loaded cluster twice, once as it is and once with one mechanism swapped for the plain,
one-at-a-time version (written out here as the reference), and asserts the same outcomes, request by request.
"""

import gc
import heapq
from dataclasses import astuple

import pytest

from jalapeno.engine import Engine, EngineConfig
from jalapeno.engine.sequence import SamplingParams, Sequence
from jalapeno.errors import CapacityError, RequestError
from jalapeno.sim.backend import SimBackend
from jalapeno.sim.client import EngineTarget, drive
from jalapeno.sim.cluster import Cluster, KVLink, _idle
from jalapeno.testing.engine_fakes import FakeCostModel
from jalapeno.workload import inferencex_workload

LINK = KVLink(2e-3, 5e9, 10_000)


def eng(max_num_seqs=32, num_kv_blocks=None, recv_interval=1, cls=Engine):
    cfg = EngineConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=2048, num_kv_blocks=num_kv_blocks,
                       recv_interval=recv_interval)
    return cls(SimBackend(FakeCostModel()), cfg)


def pools(recv_interval=1):
    """Three prefill workers, two small decode workers (few sequence slots and KV blocks: back-pressure)."""
    return [eng(recv_interval=recv_interval) for _ in range(3)], [eng(12, 120), eng(16, 90)]


class OneLandingPerEvent(Cluster):
    """Reference: one KV transfer lands per client-loop turn (the client looks at the clock between them)."""

    def _land(self, t_step):
        t, _, seq, j, _held = heapq.heappop(self._transfers)  # held: first_token_steps > 0 only
        dst = self.decode[j]
        self._inbound_n[j] -= 1
        self._inbound_blocks[j] -= dst.block_manager.blocks_for(seq.prompt_len + 1)
        if not dst.has_unfinished():
            _idle(dst, t)
        elif self.first_token_at_step and dst.clock.now() > t:  # the first token at the end of the step
            seen = dst.clock.now()
            self._step_wait_s += seen - t
            seq.first_token_s = seq.last_token_s = seen
        dst.add_sequence(seq)


class OneSubmitAtATime(Cluster):
    """Reference: each call goes to ``min(prefill, key=load)``, the loads recounted for every call."""

    def submit_many(self, calls):
        for call in calls:
            e = min(self.prefill, key=self._load)
            if not e.has_unfinished():
                _idle(e, call.arrive_s)
            e.add_request(prompt_len=call.prompt_len, sampling=self._sampling(1 if self.decode else call.max_tokens),
                          arrival_s=call.arrive_s, user_data=call)


class RecountedDispatch(Cluster):
    """Reference: for every handoff, recount each decode worker's room and load; a new Sequence per request."""

    def _dispatch(self, now):
        while self._handoffs:
            ready, src, seq = self._handoffs[0]
            fits = []
            for j, d in enumerate(self.decode):
                s, bm = d.scheduler, d.block_manager
                held = self._inbound_blocks[j] + sum(bm.blocks_for(q.prompt_len + 1) for q in s.waiting)
                if (len(s.running) + len(s.waiting) + self._inbound_n[j] < d.config.max_num_seqs
                        and bm.num_free - held >= bm.blocks_for(seq.prompt_len + 1)):
                    fits.append(j)
            if not fits:
                return
            self._handoffs.popleft()
            j = min(fits, key=lambda k: self._load(self.decode[k]) + self._inbound_n[k])
            dst = self.decode[j]
            start = max(ready, now)
            self._admission_wait_s += start - ready
            t = self._transfer(src, dst, start, seq.prompt_len)
            call = seq.user_data
            nxt = Sequence(None, self._sampling(call.max_tokens), prompt_len=seq.prompt_len, arrival_s=call.arrive_s,
                           user_data=call)
            nxt.num_output_tokens = 1
            nxt.num_computed_tokens = seq.prompt_len
            nxt.first_token_s = nxt.last_token_s = t
            heapq.heappush(self._transfers, (t, next(self._tick), nxt, j, False))
            self._inbound_n[j] += 1
            self._inbound_blocks[j] += dst.block_manager.blocks_for(seq.prompt_len + 1)


def outcomes(cls, wl, recv_interval=1):
    p, d = pools(recv_interval)
    c = cls(p, d, LINK)
    r = c.run(wl)
    return [astuple(o) for o in r.outcomes], r.num_steps, c.kv_queue_s_mean(), c.admission_wait_s_mean()


WORKLOADS = {
    "closed": inferencex_workload(300, 60, concurrency=40, num_prompts=200, seed=21),
    "open": inferencex_workload(300, 60, request_rate=300.0, num_prompts=200, seed=22),
    "sparse": inferencex_workload(300, 60, request_rate=4.0, num_prompts=40, seed=23),  # workers go idle
}


@pytest.mark.parametrize("name", WORKLOADS)
@pytest.mark.parametrize("ref", [OneLandingPerEvent, OneSubmitAtATime, RecountedDispatch])
def test_each_shortcut_equals_its_plain_reference(ref, name):
    wl = WORKLOADS[name]
    fast = outcomes(Cluster, wl)
    assert len(fast[0]) == wl.num_chains and fast[3] > 0 if name == "closed" else True
    assert fast == outcomes(ref, wl)


def test_batched_submission_follows_the_loads_with_an_inbox():
    """``recv_interval`` > 1: new requests wait in an inbox that the load does not count; batched submission
    still picks the worker the recount picks. (A cluster whose workers held only inbox requests used to stop
    on an assertion: they count as workers with work now.)"""
    wl = WORKLOADS["open"]
    assert outcomes(Cluster, wl, recv_interval=4) == outcomes(OneSubmitAtATime, wl, recv_interval=4)


def test_landing_batches_are_cut_where_a_worker_was_idle():
    """Land every due transfer at once and the sparse workload (decode workers often idle, so a landing moves
    the cluster clock) changes: the cut at an idle worker is what keeps it equal to one landing per event."""

    class Uncut(Cluster):
        def _land(self, t_step):
            while self._transfers and self._transfers[0][0] <= t_step:
                OneLandingPerEvent._land(self, t_step)

    wl = inferencex_workload(300, 60, request_rate=40.0, num_prompts=120, seed=24)
    assert outcomes(Cluster, wl) == outcomes(OneLandingPerEvent, wl)
    assert outcomes(Uncut, wl) != outcomes(OneLandingPerEvent, wl)


def test_a_handed_over_sequence_equals_a_new_one():
    """Every slot of a prefill sequence handed over to decode equals that of a sequence built for it."""
    call = object()
    e = eng()
    seq = e.add_request(prompt_len=300, sampling=SamplingParams(max_tokens=1, ignore_eos=True), arrival_s=0.5,
                        user_data=call)
    while e.has_unfinished():
        e.step()
    assert seq.finish_reason == "length" and seq.num_blocks == 0
    sp = SamplingParams(max_tokens=60, ignore_eos=True)
    seq.hand_over(sp, 1.25)
    ref = Sequence(None, sp, prompt_len=300, arrival_s=0.5, user_data=call)
    ref.num_output_tokens, ref.num_computed_tokens = 1, 300
    ref.first_token_s = ref.last_token_s = 1.25
    for name in getattr(Sequence, "__slots__", None) or Sequence.__mypyc_attrs__:  # compiled: no __slots__
        if name != "seq_id":
            assert getattr(seq, name) == getattr(ref, name), name


def test_a_sequence_holding_kv_is_not_handed_over():
    b = SimBackend(FakeCostModel())
    b.max_multi_step = 1
    e = Engine(b, EngineConfig())
    seq = e.add_request(prompt_len=300, sampling=SamplingParams(max_tokens=5, ignore_eos=True))
    e.step()
    with pytest.raises(RequestError):
        seq.hand_over(SamplingParams(max_tokens=60), 1.0)


def test_add_sequence_limits_are_the_cache_and_max_model_len():
    """One precomputed limit replaces the two checks: a prompt one token below either bound is queued, at the
    bound it is refused with the error that names it."""
    e = Engine(SimBackend(FakeCostModel()), EngineConfig(num_kv_blocks=10, block_size=16))  # 160 tokens
    assert e.config.max_model_len == 160
    e.add_request(prompt_len=159)
    with pytest.raises(CapacityError, match="more KV blocks"):  # 160 + the token it samples
        e.add_request(prompt_len=160)
    e2 = Engine(SimBackend(FakeCostModel()), EngineConfig(num_kv_blocks=10, block_size=16, max_model_len=100))
    e2.add_request(prompt_len=99)
    with pytest.raises(RequestError, match="max_model_len=100"):
        e2.add_request(prompt_len=100)
    e3 = Engine(SimBackend(FakeCostModel()), EngineConfig(num_kv_blocks=10, block_size=16, num_speculative_tokens=3))
    e3.add_request(prompt_len=156)  # 156 + 1 + 3 = 160 tokens of KV: fits
    with pytest.raises(CapacityError, match="more KV blocks"):
        e3.add_request(prompt_len=157)


def test_a_simulation_leaves_no_reference_cycles():
    """The client pauses the cyclic garbage collector while it drives a run: that is only safe while a run
    makes no cyclic garbage (a finished sequence and its reusable decode chunk used to be one)."""
    was = gc.isenabled()
    try:
        for wl in (WORKLOADS["closed"], WORKLOADS["open"]):
            p, d = pools()
            c = Cluster(p, d, LINK)
            gc.collect()
            gc.disable()  # else a collection could run between the end of the run and the count below
            r = c.run(wl)
            assert len(r.outcomes) == wl.num_chains and not gc.isenabled()
            assert gc.collect() == 0
    finally:
        if was:
            gc.enable()


def test_the_collector_is_paused_inside_a_run_and_restored_after_an_error():
    """``drive`` turns the cyclic collector off while it runs and back on afterwards, also when the run raises
    (it stays off if it was off)."""

    class Failing(Cluster):
        def advance(self, horizon):
            seen.append(gc.isenabled())
            raise RuntimeError("boom")

    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            seen: list[bool] = []
            p, d = pools()
            with pytest.raises(RuntimeError, match="boom"):
                Failing(p, d, LINK).run(WORKLOADS["closed"])
            assert seen == [False] and gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


class OneCallAtATime(EngineTarget):
    """Reference: each call through ``submit`` (``Engine.add_request``, new ``SamplingParams`` per call)."""

    def submit_many(self, calls):
        for call in calls:
            self.submit(call)


@pytest.mark.parametrize("name", ["closed", "open", "sparse", "chains"])
def test_one_engine_batched_submission_equals_one_call_at_a_time(name):
    """``EngineTarget.submit_many`` (shared sampling parameters, sequences queued directly) gives the same
    outcomes, request by request, as submitting each call through ``add_request``; chained calls keep their
    ``kv_key``."""
    wl = WORKLOADS.get(name) or inferencex_workload(300, 40, concurrency=8, num_prompts=24, chain_calls=3, seed=24)
    runs = []
    for cls in (EngineTarget, OneCallAtATime):
        keys: list = []

        class KeyRecording(Engine):  # a subclass: the native build's engine methods cannot be replaced per instance
            def add_sequence(self, seq, keys=keys):
                keys.append(seq.kv_key)
                super().add_sequence(seq)

        target = cls(eng(16, 200, cls=KeyRecording), chains=name == "chains")
        r = drive(target, wl)
        runs.append(([astuple(o) for o in r.outcomes], r.num_steps, r.duration_s, keys))
    assert len(runs[0][0]) == wl.num_chains * wl.chain_calls
    assert runs[0] == runs[1]
    assert len(runs[0][3]) == len(runs[0][0])  # every sequence queued was seen
    if name == "chains":
        assert set(runs[0][3]) == set(range(wl.num_chains))
