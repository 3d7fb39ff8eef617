"""Several engines on one virtual timeline: data-parallel replicas, or disaggregated prefill/decode pools.

Not a second scheduler: each worker is an ordinary :class:`~jalapeno.engine.Engine` with its own backend and
clock; this coordinator only routes requests (least-loaded worker) and always advances the worker whose
next event is earliest. A worker's multi-step decode is cut at the earliest time another event could reach
it — the next client arrival, the next KV transfer landing, or the earliest completion any other worker can
reach (its clock plus, while it only decodes, its fewest steps to a completion times its last step time;
steps only get longer as contexts grow) — so workers interleave as they would in real time.

Disaggregated serving: a request prefills in the prefill pool (``max_tokens=1``: its first token), its KV
(``kv_bytes_per_token × prompt``) crosses the link between the pools (:class:`KVLink`: ``handoff + latency +
bytes / bandwidth``; the handoff is the disaggregated stack's fixed per-request cost: routing the request to a
decode worker, the KV bootstrap handshake and the completion notice), and it then decodes in the decode pool. Its TTFT ends when the KV (and first token) reach the
decode worker, or, when that worker is mid-step, at the end of that step: a decode server's loop polls its
transfers once per iteration and streams the first token at the next one (SGLang ``process_decode_queue`` ->
``process_batch_result_prebuilt``; ``first_token_at_step``). Each worker's link lanes are servers with their own virtual-time queue: a transfer starts when
its KV is ready and both the sending worker's and the receiving worker's earliest-free lane are free, so a busy
link delays the next request's KV.

Decode admission (back-pressure): as SGLang's and Dynamo's decode workers pre-allocate a request's KV before its
transfer, a prefilled request is handed to a decode worker only when that worker has a free sequence slot
(``max_num_seqs``, counting the requests already on their way) and free KV blocks for its prompt (after those
of the requests it already holds waiting or inbound). Until then it waits, first come first served, in the
cluster's handoff queue; its TTFT includes the wait, and the prefill pool runs ahead meanwhile.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass

import numpy as np

from jalapeno.sim.client import Call, SimResult, drive
from jalapeno.engine.engine import Engine
from jalapeno.engine.sequence import SamplingParams, Sequence
from jalapeno.workload import Workload


@dataclass(frozen=True)
class KVLink:
    """The network between the pools: seconds = ``latency_s + bytes / bytes_per_s``; ``bytes_per_token`` is
    the KV one prompt token occupies (all layers, all chips holding it); ``state_bytes`` the linear-attention
    state each request carries whatever its length (0 without linear attention); ``handoff_s`` the serving
    stack's fixed per-request handoff latency (:func:`jalapeno.perf.frameworks.kv_handoff_ms`), paid once per
    request on top of the wire latency and without holding a link lane."""

    latency_s: float
    bytes_per_s: float  # one transfer (all the chips holding the sequence's KV sending at once)
    bytes_per_token: float
    state_bytes: float = 0.0
    #: parallel transfers one prefill (decode) worker can send (receive) at once
    send_lanes: int = 1
    recv_lanes: int = 1
    fabric: str = "scale-out"  # "scale-up" (NVLink inside one domain) | "scale-out" (NIC)
    handoff_s: float = 0.0

    def busy_s(self, tokens: int) -> float:
        """Seconds one transfer of ``tokens`` prompt tokens occupies its lanes."""
        return (tokens * self.bytes_per_token + self.state_bytes) / self.bytes_per_s

    @property
    def fixed_s(self) -> float:
        """Seconds every transfer takes besides its bytes: the wire latency and the stack's handoff."""
        return self.latency_s + self.handoff_s

    def transfer_s(self, tokens: int) -> float:
        return self.fixed_s + self.busy_s(tokens)


def _bound(e: Engine) -> float:
    """Earliest time ``e`` could finish a request (a lower bound), from its current state. The lockstep group's
    members (the head of ``running``: decoding, no look-ahead held) are counted as a block, not one by one."""
    now = e.clock.now()
    s = e.scheduler
    if not s.running and not s.waiting:
        return float("inf")
    d = e.last_decode_step_s
    if s.waiting or d <= 0:
        return now
    g = s.group
    m = len(g) if g is not None and g.ahead == 0 and not g.capped else 0
    rest = s.running[m:] if m else s.running
    if any(q.num_output_tokens == 0 or q.num_computed_tokens < q.num_tokens - 1 for q in rest):
        return now
    per = 1 + e.config.num_speculative_tokens
    steps = min(((q.sampling.max_tokens - q.num_output_tokens - 1) // per + 1 for q in rest), default=1 << 62)
    if m:
        steps = min(steps, g.steps_left())  # members: max_tokens - their output (per == 1, none capped)
    bm = e.block_manager
    need = sum(bm.blocks_needed(q, q.num_computed_tokens + steps * per) for q in rest)
    if m:
        need += g.blocks_for(steps * per)
    if need > bm.num_free:
        return now  # it may preempt (and then run shorter steps) before that
    return now + (steps - 1) * d


class Cluster:
    """A client target over ``workers`` (aggregated replicas) or ``prefill`` + ``decode`` pools."""

    def __init__(self, workers: list[Engine], decode: list[Engine] | None = None, link: KVLink | None = None,
                 *, first_token_at_step: bool = True) -> None:
        self.prefill = workers
        #: disaggregated: a request's first token is streamed by its decode worker's loop, at the end of the decode
        #: step in progress when its KV landed (False: at the landing itself)
        self.first_token_at_step = first_token_at_step
        self._step_wait_s = 0.0
        self.decode = decode or []
        if self.decode and link is None:
            raise ValueError("a disaggregated cluster needs the KV link between its pools")
        self.link = link
        self.all = self.prefill + self.decode
        self._transfers: list[tuple[float, int, Sequence, Engine]] = []
        #: per decode worker (by id): the transfers on their way to it, and the KV blocks they pre-allocate
        #: (running totals of what ``_transfers`` holds, so admission checks do not scan the heap)
        self._inbound_n: dict[int, int] = {id(d): 0 for d in self.decode}
        self._inbound_blocks: dict[int, int] = {id(d): 0 for d in self.decode}
        self._tick = itertools.count()
        self._finished_direct: list[Sequence] = []
        # free-at times of each worker's KV link lanes (by id), and the total time transfers waited for one
        self._lanes: dict[int, list[float]] = {}
        if link is not None:
            self._lanes = {id(e): [0.0] * link.send_lanes for e in self.prefill}
            self._lanes.update({id(e): [0.0] * link.recv_lanes for e in self.decode})
        self._queued_s = 0.0
        self._num_transfers = 0
        #: prefilled requests waiting for room in a decode worker: (KV ready at, sending worker, sequence)
        self._handoffs: deque[tuple[float, Engine, Sequence]] = deque()
        self._admission_wait_s = 0.0
        self._params: dict[int, SamplingParams] = {}

    # --- Target protocol ------------------------------------------------------------------------
    def _earliest_busy(self) -> tuple[float, Engine | None]:
        """The earliest clock among the workers with work, and its worker (the first such; inf, None: none)."""
        t_min, first = float("inf"), None
        for e in self.all:
            s = e.scheduler
            if s.running or s.waiting:
                t = e.clock.now()
                if t < t_min:
                    t_min, first = t, e
        return t_min, first

    def now(self) -> float:
        t, first = self._earliest_busy()
        if first is not None:
            return t
        if self._transfers:
            return self._transfers[0][0]
        return max(e.clock.now() for e in self.all)

    def request_latency_s(self) -> float:
        """Requests enter through the prefill (or only) pool's serving front end."""
        return self.prefill[0].backend.request_latency_s

    def request_latency_per_token_s(self) -> float:
        return float(getattr(self.prefill[0].backend, "request_latency_per_token_s", 0.0))

    def busy(self) -> bool:
        return bool(self._transfers) or bool(self._handoffs) or any(e.has_unfinished() for e in self.all)

    def wait_until(self, t: float) -> None:
        for e in self.all:
            if not e.has_unfinished():
                _idle(e, t)

    @staticmethod
    def _load(e: Engine) -> int:
        s = e.scheduler
        return len(s.running) + len(s.waiting)

    def submit(self, call: Call) -> None:
        e = min(self.prefill, key=self._load)
        if not e.has_unfinished():
            _idle(e, call.arrive_s)
        max_tokens = 1 if self.decode else call.max_tokens
        e.add_request(
            prompt_len=call.prompt_len,
            sampling=self._sampling(max_tokens),
            arrival_s=call.arrive_s,
            user_data=call,
        )

    def _sampling(self, max_tokens: int) -> SamplingParams:
        """The (frozen, shared) sampling parameters of a request of ``max_tokens`` that ignores EOS."""
        sp = self._params.get(max_tokens)
        if sp is None:
            sp = self._params[max_tokens] = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        return sp

    def _horizon(self, skip: Engine, external: float | None) -> float | None:
        h = float("inf") if external is None else external
        if self._transfers:
            h = min(h, self._transfers[0][0])
        for e in self.all:
            if e is not skip:
                b = _bound(e)
                if e in self.prefill and self.decode and b < float("inf"):
                    b += self.link.fixed_s  # type: ignore[union-attr]
                h = min(h, b)
        return None if h == float("inf") else h

    def advance(self, horizon: float | None) -> list[Sequence]:
        t_step, e = self._earliest_busy()
        if self._transfers and self._transfers[0][0] <= t_step:
            t, _, seq, dst = heapq.heappop(self._transfers)
            self._inbound_n[id(dst)] -= 1
            self._inbound_blocks[id(dst)] -= dst.block_manager.blocks_for(seq.prompt_len + 1)
            if not dst.has_unfinished():
                _idle(dst, t)
            elif self.first_token_at_step and dst.clock.now() > t:
                # the decode worker's loop sees the landed KV only after the step in progress (its clock is that
                # step's end: the cluster cut its steps at this landing) and streams the first token then
                seen = dst.clock.now()
                self._step_wait_s += seen - t
                seq.first_token_s = seq.last_token_s = seen
            dst.add_sequence(seq)
            return []
        assert e is not None
        e.next_event_s = self._horizon(e, horizon)
        done = e.step_finished()
        if not self.decode:
            return done
        if e in self.decode:
            if done and self._handoffs:
                self._dispatch(e.clock.now())  # slots and KV freed now: waiting handoffs may go
            return done
        out = []
        for seq in done:  # prefill finished: queue the handoff to the decode pool
            call: Call = seq.user_data  # type: ignore[assignment]
            if call.max_tokens <= 1:
                out.append(seq)
                continue
            self._handoffs.append((float(seq.finish_s), e, seq))
        self._dispatch(e.clock.now())
        return out

    def _room(self, d: Engine, tokens: int, waiting_held: int) -> bool:
        """Whether decode worker ``d`` can pre-allocate one more request of ``tokens`` prompt tokens: a free
        sequence slot and free KV blocks, counting the requests it holds waiting (``waiting_held``: their
        blocks, :meth:`_waiting_held`) or has inbound."""
        s, bm = d.scheduler, d.block_manager
        if len(s.running) + len(s.waiting) + self._inbound_n[id(d)] >= d.config.max_num_seqs:
            return False
        held = self._inbound_blocks[id(d)] + waiting_held
        return bm.num_free - held >= bm.blocks_for(tokens + 1)

    @staticmethod
    def _waiting_held(d: Engine) -> int:
        """KV blocks the requests waiting in decode worker ``d`` will take at admission (prompt + first token)."""
        bm = d.block_manager
        return sum(bm.blocks_for(q.prompt_len + 1) for q in d.scheduler.waiting)

    def _dispatch(self, now: float) -> None:
        """Hand waiting prefilled requests, in arrival order, to the least-loaded decode worker with room; a
        transfer starts when its KV is ready, or at ``now`` (when the room appeared) if it had to wait."""
        # the decode workers' waiting queues do not change during one dispatch (only their inbound transfers)
        waiting_held = [self._waiting_held(d) for d in self.decode] if self._handoffs else []
        while self._handoffs:
            ready, src, seq = self._handoffs[0]
            fits = [d for d, w in zip(self.decode, waiting_held) if self._room(d, seq.prompt_len, w)]
            if not fits:
                return
            self._handoffs.popleft()
            dst = min(fits, key=lambda d: self._load(d) + self._inbound(d))
            start = max(ready, now)
            self._admission_wait_s += start - ready
            call: Call = seq.user_data  # type: ignore[assignment]
            t = self._transfer(src, dst, start, seq.prompt_len)
            nxt = Sequence(
                None,
                self._sampling(call.max_tokens),
                prompt_len=seq.prompt_len,
                arrival_s=call.arrive_s,
                user_data=call,
            )
            nxt.num_output_tokens = 1
            nxt.num_computed_tokens = seq.prompt_len
            nxt.first_token_s = nxt.last_token_s = t
            heapq.heappush(self._transfers, (t, next(self._tick), nxt, dst))
            self._inbound_n[id(dst)] += 1
            self._inbound_blocks[id(dst)] += dst.block_manager.blocks_for(seq.prompt_len + 1)

    def _transfer(self, src: Engine, dst: Engine, ready: float, tokens: int) -> float:
        """Queue one KV transfer on the earliest-free lanes of ``src`` and ``dst``; returns its arrival time."""
        link = self.link
        assert link is not None
        tx, rx = self._lanes[id(src)], self._lanes[id(dst)]
        i, j = tx.index(min(tx)), rx.index(min(rx))
        start = max(ready, tx[i], rx[j])
        tx[i] = rx[j] = start + link.busy_s(tokens)
        self._queued_s += start - ready
        self._num_transfers += 1
        return tx[i] + link.fixed_s

    def kv_queue_s_mean(self) -> float:
        """Mean time a KV transfer waited for a busy link lane (0 when none waited)."""
        return self._queued_s / self._num_transfers if self._num_transfers else 0.0

    def admission_wait_s_mean(self) -> float:
        """Mean time a prefilled request waited for room in the decode pool (0 when none waited)."""
        return self._admission_wait_s / self._num_transfers if self._num_transfers else 0.0

    def step_wait_s_mean(self) -> float:
        """Mean time a landed KV waited for its decode worker's step in progress to end (0 when none did)."""
        return self._step_wait_s / self._num_transfers if self._num_transfers else 0.0

    def _inbound(self, d: Engine) -> int:
        return self._inbound_n[id(d)]

    def result_parts(self) -> tuple[float, int, np.ndarray, np.ndarray]:
        end = max(e.clock.now() for e in self.all)
        for e in self.all:
            _idle(e, end)
        vals, cnts = zip(*(e.itl_samples() for e in self.all))
        return (
            sum(e.energy_j for e in self.all),
            sum(e.num_steps for e in self.all),
            np.concatenate(vals),
            np.concatenate(cnts),
        )

    def run(self, wl: Workload) -> SimResult:
        return drive(self, wl)


def _idle(e: Engine, t: float) -> None:
    dt = t - e.clock.now()
    if dt > 0:
        e.clock.wait_until(t)
        e.energy_j += e.backend.idle_power_w * dt
