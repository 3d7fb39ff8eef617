"""Drive a :class:`~jalapeno.workload.Workload` through an engine (or a cluster of engines) on its clock.

The *client* side (who sends what, when) is the same for one engine and for a disaggregated cluster:

* closed loop — ``concurrency`` requests (chains) in flight; a finished one is replaced at once;
* open loop — chains sent at their arrival times, at most ``max_concurrency`` in flight (a blocked one is
  sent, and its clock starts, when a slot frees, as vLLM's client semaphore does);
* chains — call ``i+1`` is sent when call ``i`` finishes, its prompt = previous prompt + output + new tokens.

The loop: release every request due by ``now``; if nothing is in flight jump to the next arrival; else let
the target advance one event, telling it the next arrival (multi-step decodes stop there).
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from jalapeno._mypyc import mypyc_attr  # a compile-time hint (jalapeno build-native); plain Python: a no-op
from jalapeno.metrics import SLO, RequestOutcome, compute_metrics
from jalapeno.engine.sequence import SamplingParams, Sequence
from jalapeno.sim.target import Target  # a Protocol, in a module of its own: stays one where this one is compiled
from jalapeno.workload import Workload

if TYPE_CHECKING:
    from jalapeno.engine.engine import Engine
    from jalapeno.sim.early_stop import EarlyStop


@dataclass
class SimResult:
    """Outcome of :func:`run_workload`: per-call outcomes, the run's duration (s, from the first send to the
    last completion), energy (J, all chips), pooled ITLs (s, weighted) and, for chains, their end-to-end
    latencies (s)."""

    outcomes: list[RequestOutcome]
    duration_s: float
    energy_j: float
    itl_values: np.ndarray
    itl_counts: np.ndarray
    chain_e2el_s: np.ndarray | None = None
    num_steps: int = 0
    extra: dict = field(default_factory=dict)

    def metrics(self, *, num_chips: int = 1, output_chips: int | None = None, slo: SLO | None = None) -> dict:
        """The vLLM/InferenceX metrics object (``jalapeno.metrics.compute_metrics``), plus chain latencies."""
        m = compute_metrics(
            self.outcomes,
            self.duration_s,
            num_chips=num_chips,
            energy_j=self.energy_j,
            slo=slo,
            output_chips=output_chips,
            itl_values=self.itl_values,
            itl_counts=self.itl_counts,
            energy_source="predicted",  # the cost model's energy, not a power meter
        )
        if self.chain_e2el_s is not None and self.chain_e2el_s.size:
            m["mean_chain_e2el_ms"] = float(np.mean(self.chain_e2el_s) * 1000)
            m["median_chain_e2el_ms"] = float(np.median(self.chain_e2el_s) * 1000)
        return m


@dataclass(slots=True, init=False)
class Call:
    """One request the client sends: ``chain``'s call number ``index`` (slotted, with a plain ``__init__``:
    one is built per request)."""

    chain: int
    index: int
    prompt_len: int
    max_tokens: int
    send_s: float
    chain_start_s: float
    #: when the call reaches the engine: ``send_s`` + the workload's request latency
    arrive_s: float

    def __init__(self, chain: int, index: int, prompt_len: int, max_tokens: int, send_s: float,
                 chain_start_s: float, arrive_s: float = -1.0) -> None:
        self.chain = chain
        self.index = index
        self.prompt_len = prompt_len
        self.max_tokens = max_tokens
        self.send_s = send_s
        self.chain_start_s = chain_start_s
        self.arrive_s = send_s if arrive_s < 0 else arrive_s


class Client:
    """The load generator's state: which calls are due, and what came back."""

    def __init__(self, wl: Workload, serving_latency_s: float = 0.0, per_prompt_token_s: float = 0.0) -> None:
        self.wl = wl
        self.n = wl.num_chains
        self.calls = wl.chain_calls
        # an int, or math.inf (Any: compiled, it stays the Python object it is, as the comparisons and the index
        # freed[-room] need)
        self.limit: Any = wl.concurrency if wl.closed_loop else (wl.max_concurrency or math.inf)
        self.next_chain = 0
        self.in_flight = 0
        self.due: deque[Call] = deque()  # follow-up calls, sent at once
        self.delay = float(wl.request_latency_s) + float(serving_latency_s)
        self.per_token = float(per_prompt_token_s)  # front-end time per prompt token (tokenization)
        self.in_transit: list[tuple[float, int, Call]] = []  # heap of sent calls not yet at the engine
        self._sent = 0
        self._freed: list[float] = []
        self.outcomes: list[RequestOutcome] = []
        self.chain_e2el: list[float] = []
        # the workload's lengths and arrival times as Python numbers, read once per call
        self._in: list[int] = wl.input_lens.tolist()
        self._out: list[int] = wl.output_lens.tolist()
        self._arr: list[float] | None = None if wl.arrival_s is None else np.asarray(wl.arrival_s, float).tolist()

    def release(self, now: float) -> list[Call]:
        """Calls that reach the engine by ``now`` (sent at least ``request_latency_s`` earlier)."""
        can_start = self.next_chain < self.n and self.in_flight < self.limit
        sent = self._send(now, can_start) if self.due or can_start else []  # nothing to send: no call
        self._freed.clear()
        in_transit = self.in_transit
        delay, per_token = self.delay, self.per_token
        if delay == 0.0 and per_token == 0.0 and not in_transit:
            return sent
        push = heapq.heappush
        for c in sent:
            c.arrive_s = a = c.send_s + delay + per_token * c.prompt_len
            push(in_transit, (a, self._sent, c))
            self._sent += 1
        out = []
        if in_transit and in_transit[0][0] <= now:
            pop = heapq.heappop
            while in_transit and in_transit[0][0] <= now:
                out.append(pop(in_transit)[2])
        return out

    def _send(self, now: float, can_start: bool) -> list[Call]:
        """Calls to send by ``now``: follow-up calls of chains, then (``can_start``: a chain is left and a slot
        is free) new chains while a slot is free. A chain that found every slot busy starts when one frees
        (``_freed``: completions since the last release, cleared by :meth:`release` after this)."""
        due = self.due
        out = list(due) if due else []
        due.clear()
        if can_start:
            self._start_chains(now, out)
        return out

    def _start_chains(self, now: float, out: list[Call]) -> None:
        """Append to ``out`` the new chains that start by ``now`` while a slot is free (see :meth:`_send`)."""
        arr, ins, outs, calls = self._arr, self._in, self._out, self.calls
        freed = sorted(self._freed)
        n, limit = self.n, self.limit
        chain, in_flight = self.next_chain, self.in_flight
        while chain < n and in_flight < limit:
            a = 0.0 if arr is None else arr[chain]
            if a > now:
                break
            t = a
            if freed:  # busy slots at time x = in_flight + completions after x; must be < limit
                room = limit - in_flight  # >= 1
                if room <= len(freed):
                    t = max(a, freed[-room])
            k = chain * calls
            out.append(Call(chain, 0, ins[k], outs[k], t, t))
            chain += 1
            in_flight += 1
        self.next_chain, self.in_flight = chain, in_flight

    def next_time(self) -> float | None:
        """When the next call will reach the engine, if that is known now (None: only a completion can send
        one)."""
        t: float | None = None
        if self.due:
            t = self.due[0].send_s + self.delay
        elif self._arr is not None and self.next_chain < self.n and self.in_flight < self.limit:
            t = self._arr[self.next_chain] + self.delay
        if self.in_transit:
            t = self.in_transit[0][0] if t is None else min(t, self.in_transit[0][0])
        return t

    @property
    def done(self) -> bool:
        return self.next_chain >= self.n and self.in_flight == 0 and not self.due and not self.in_transit

    def on_finish(self, seq: Sequence) -> None:
        call: Call = seq.user_data  # type: ignore[assignment]
        t = seq.finish_s
        ok = seq.finish_reason != "abort"
        # positional, in field order (success, prompt_tokens, output_tokens, ttft_s, e2el_s, itl_s, itl_counts,
        # start_s, error): a dataclass's keyword call costs ≈ 0.7 µs more, once per request. ``itl_s`` is empty:
        # the engines pool inter-token gaps (SimResult.itl_values), none per request
        self.outcomes.append(RequestOutcome(ok, seq.prompt_len, seq.num_output_tokens,
                                            (seq.first_token_s or t) - call.send_s, t - call.send_s,  # type: ignore[operator]
                                            (), None,
                                            call.send_s, "" if ok else "aborted"))
        if call.index + 1 < self.calls:
            k = call.chain * self.calls + call.index + 1
            p = call.prompt_len + seq.num_output_tokens + self._in[k]
            self.due.append(Call(call.chain, call.index + 1, p, self._out[k], t,  # type: ignore[arg-type]
                                 call.chain_start_s))
            return
        if self.calls > 1:
            self.chain_e2el.append(t - call.chain_start_s)  # type: ignore[operator]
        self.in_flight -= 1
        if self.limit != math.inf:
            self._freed.append(t)  # type: ignore[arg-type]


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled: tests subclass it
class EngineTarget:
    """One engine as a client target."""

    def __init__(self, engine, chains: bool = False) -> None:  # engine: jalapeno.engine.Engine
        self.engine = engine
        #: the workload chains calls: each call's prompt extends the previous one's (prefix reuse by chain)
        self.chains = chains
        self._params: dict[int, SamplingParams] = {}  # max_tokens -> the (frozen, shared) sampling parameters
        # ``now()`` and ``busy()`` (the Target protocol's), asked once or twice per engine event: bound to what
        # answers them (the engine's clock and scheduler, fixed for its life), without a forwarding call between
        self.now: Callable[[], float] = engine.clock.now
        self.busy: Callable[[], bool] = engine.scheduler.has_unfinished

    def request_latency_s(self) -> float:
        """Per-request serving latency the backend models (simulated backends; 0 for real ones, whose latency is
        measured)."""
        return self.engine.backend.request_latency_s

    def request_latency_per_token_s(self) -> float:
        """The part of the serving latency that grows with the prompt, per prompt token (simulated backends)."""
        return float(getattr(self.engine.backend, "request_latency_per_token_s", 0.0))

    def wait_until(self, t: float) -> None:
        """Idle until ``t``; a simulated backend's chips draw idle power meanwhile."""
        e = self.engine
        dt = t - e.clock.now()
        e.clock.wait_until(t)
        if dt > 0:
            e.energy_j += e.backend.idle_power_w * dt

    def submit(self, call: Call) -> None:
        self.engine.add_request(
            prompt_len=call.prompt_len,
            sampling=SamplingParams(max_tokens=call.max_tokens, ignore_eos=True),
            arrival_s=call.arrive_s,
            user_data=call,
            kv_key=call.chain if self.chains else None,
        )

    def submit_many(self, calls: list[Call]) -> None:
        """Each call as :meth:`submit` would queue it, without its per-call set-up: one shared
        ``SamplingParams`` per ``max_tokens`` (frozen), the sequence built here and queued with ``add_sequence``."""
        e, params, chains = self.engine, self._params, self.chains
        for call in calls:
            sp = params.get(call.max_tokens)
            if sp is None:
                sp = params[call.max_tokens] = SamplingParams(max_tokens=call.max_tokens, ignore_eos=True)
            seq = Sequence.length_only(sp, call.prompt_len, call.arrive_s, call)
            if chains:
                seq.kv_key = call.chain
            e.add_sequence(seq)

    def advance(self, horizon: float | None) -> list[Sequence]:
        e = self.engine
        e.next_event_s = horizon
        steps = e.num_steps
        done = e.step_finished()
        if e.num_steps == steps and e.has_unfinished():  # pragma: no cover - a scheduler invariant broke
            raise RuntimeError("engine made no progress: waiting requests can never be scheduled")
        return done

    def result_parts(self) -> tuple[float, int, np.ndarray, np.ndarray]:
        v, c = self.engine.itl_samples()
        return self.engine.energy_j, self.engine.num_steps, v, c


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (restored after, if it was on). A simulation allocates a few
    objects per request (calls, sequences, chunks, outcomes) that form no reference cycles (reference
    counting frees them: ``tests/sim/test_cluster.py::test_a_simulation_leaves_no_reference_cycles``), yet the
    collector's passes, triggered by those allocations, walk every live object: at rack scale they took
    ≈ 13 % of the run."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def drive(target: Target, wl: Workload, early_stop: "EarlyStop | None" = None) -> SimResult:
    """Run ``wl`` against ``target`` until every call has finished (``early_stop``: until the latency
    statistics converged and the calls in flight then finished; see :mod:`jalapeno.sim.early_stop`)."""
    with cyclic_gc_paused():
        return _drive(target, wl, early_stop)


def _drive(target: Target, wl: Workload, early_stop: "EarlyStop | None") -> SimResult:
    per_token = getattr(target, "request_latency_per_token_s", None)
    client = Client(wl, target.request_latency_s(), per_token() if per_token else 0.0)
    if early_stop is not None:
        early_stop.start(wl.concurrency if wl.closed_loop else (wl.max_concurrency or 1),  # type: ignore[arg-type]
                         wl.num_chains * wl.chain_calls)
    last_finish = 0.0
    submit_many = getattr(target, "submit_many", None)
    if submit_many is None:  # a target of its own (tests): one call at a time
        def submit_many(calls: list[Call]) -> None:
            for call in calls:
                target.submit(call)
    release, now, busy, advance = client.release, target.now, target.busy, target.advance
    next_time, on_finish = client.next_time, client.on_finish
    while not client.done:
        calls = release(now())
        if calls:
            submit_many(calls)
        if not busy():
            t = next_time()
            if t is None:  # pragma: no cover - would mean a lost request
                raise RuntimeError("simulated client stalled: nothing in flight and nothing due")
            target.wait_until(t)
            continue
        for seq in advance(next_time()):
            on_finish(seq)
            last_finish = max(last_finish, seq.finish_s or 0.0)
            if early_stop is not None:
                o = client.outcomes[-1]
                if early_stop.observe(o.ttft_s, o.e2el_s, o.output_tokens, seq.finish_s or 0.0):
                    client.n = client.next_chain  # converged: send no new chain, let those in flight finish
    energy, steps, v, c = target.result_parts()
    chains = np.asarray(client.chain_e2el) if wl.chain_calls > 1 else None
    res = SimResult(client.outcomes, last_finish, energy, v, c, chains, steps)
    if early_stop is not None:
        res.extra["early_stop"] = early_stop.report(len(client.outcomes))
        res = early_stop.extrapolate(res)
    return res


def run_workload(target: "Engine | Target", wl: Workload, early_stop: "EarlyStop | None" = None) -> SimResult:
    """Drive ``wl`` (a :class:`jalapeno.workload.Workload`) to completion on ``target``'s clock: one
    :class:`~jalapeno.engine.Engine`, or a :class:`~jalapeno.sim.cluster.Cluster` of them (``early_stop``: the
    opt-in statistical early stop)."""
    return drive(target if isinstance(target, Target) else EngineTarget(target, wl.chain_calls > 1), wl, early_stop)
