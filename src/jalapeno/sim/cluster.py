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
``process_batch_result_prebuilt``; ``first_token_at_step``); with ``first_token_steps`` k > 0 the loop takes it
only k iterations later, each priced at the receiving worker's latest decode step (SGLang's decode loop: the
bootstrap handshake and KV pre-allocation iterations before the prefill, the overlap loop's result processing
after it; :data:`jalapeno.perf.frameworks.FIRST_TOKEN_STEPS_SOURCE`), during which it stays inbound (slot and KV
held) and then streams its first token and joins the batch; a worker with nothing running loops at once (no
wait). Each worker's link lanes are servers with their own virtual-time queue: a transfer starts when
its KV is ready and both the sending worker's and the receiving worker's earliest-free lane are free, so a busy
link delays the next request's KV.

Decode admission (back-pressure): as SGLang's and Dynamo's decode workers pre-allocate a request's KV before its
transfer, a prefilled request is handed to a decode worker only when that worker has a free sequence slot
(``max_num_seqs``, counting the requests already on their way) and free KV blocks for its prompt (after those
of the requests it already holds waiting or inbound). Until then it waits, first come first served, in the
cluster's handoff queue; its TTFT includes the wait, and the prefill pool runs ahead meanwhile.

Routing (``routing``): ``"least-loaded"`` (the default) sends a request to the least-loaded prefill worker and
its KV to the least-loaded decode worker with room; ``"random"`` is a router that picks each request's prefill
worker and decode worker uniformly at random, whatever their load (SGLang's PD router with ``--prefill-policy
random --decode-policy random``, as the InferenceX MI355X recipes launch it): a prefilled request then waits for
room in *its* decode worker, first come first served there, even while another worker has free slots. The
draws come from one seeded generator (``seed``), in the order requests arrive and finish prefill.
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
    if not s.running and not s.waiting and not s.inbox:
        return float("inf")
    d = e.last_decode_step_s
    if s.waiting or s.inbox or d <= 0:
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
                 *, first_token_at_step: bool = True, routing: str = "least-loaded", seed: int = 0,
                 first_token_steps: float = 0.0) -> None:
        if routing not in ROUTING:
            raise ValueError(f"routing {routing!r}: use one of {', '.join(ROUTING)}")
        if not first_token_steps >= 0:
            raise ValueError(f"first_token_steps must be >= 0 decode steps (got {first_token_steps})")
        #: disaggregated: decode-loop iterations a landed request still waits, after the step in progress, before
        #: its first token and its first decode step, each priced at its decode worker's latest decode step (0: none;
        #: a worker with nothing running loops at once, so it waits none)
        self.first_token_steps = float(first_token_steps)
        self.prefill = workers
        #: how requests pick their workers (:data:`ROUTING`); ``"random"`` draws from ``_rng``
        self.routing = routing
        self._rng = np.random.default_rng(seed) if routing == "random" else None
        #: disaggregated: a request's first token is streamed by its decode worker's loop, at the end of the decode
        #: step in progress when its KV landed (False: at the landing itself)
        self.first_token_at_step = first_token_at_step
        self._step_wait_s = 0.0
        self.decode = decode or []
        #: per decode worker (by index): the duration of its latest decode step (the mean over the latest run of
        #: steps the cluster let it take); what one loop iteration costs it while it decodes
        self._step_s = [0.0] * len(self.decode)
        self._decode_index = {id(d): j for j, d in enumerate(self.decode)}
        if self.decode and link is None:
            raise ValueError("a disaggregated cluster needs the KV link between its pools")
        self.link = link
        self.all = self.prefill + self.decode
        #: KV transfers on their way: (lands at, tie, sequence, index of the decode worker, whether it already
        #: landed and waits out ``first_token_steps``: then the time is when its decode worker takes it)
        self._transfers: list[tuple[float, int, Sequence, int, bool]] = []
        #: per decode worker (by index): the transfers on their way to it, and the KV blocks they pre-allocate
        #: (running totals of what ``_transfers`` holds, so admission checks do not scan the heap)
        self._inbound_n: list[int] = [0] * len(self.decode)
        self._inbound_blocks: list[int] = [0] * len(self.decode)
        #: every worker with whether it is a prefill worker of a disaggregated cluster (its completions reach
        #: the client only after a KV transfer)
        self._kinds = [(e, bool(self.decode) and i < len(self.prefill)) for i, e in enumerate(self.all)]
        #: the link's fixed seconds per transfer (wire latency + handoff; the link is frozen)
        self._fixed_s = link.fixed_s if link is not None else 0.0
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
        #: random routing: per decode worker, the prefilled requests the router sent there, waiting for its room
        self._handoffs_to: list[deque[tuple[float, Engine, Sequence]]] = [deque() for _ in self.decode]
        self._num_handoffs_to = 0
        self._admission_wait_s = 0.0
        self._params: dict[int, SamplingParams] = {}

    # --- Target protocol ------------------------------------------------------------------------
    def _earliest_busy(self) -> tuple[float, Engine | None]:
        """The earliest clock among the workers with work (running, waiting or, with ``recv_interval``, not yet
        received), and its worker (the first such; inf, None: none)."""
        t_min, first = float("inf"), None
        for e in self.all:
            s = e.scheduler
            if s.running or s.waiting or s.inbox:
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
        return (bool(self._transfers) or bool(self._handoffs) or self._num_handoffs_to > 0
                or any(e.has_unfinished() for e in self.all))

    def wait_until(self, t: float) -> None:
        for e in self.all:
            if not e.has_unfinished():
                _idle(e, t)

    @staticmethod
    def _load(e: Engine) -> int:
        s = e.scheduler
        return len(s.running) + len(s.waiting)

    def submit(self, call: Call) -> None:
        self.submit_many([call])

    def submit_many(self, calls: list[Call]) -> None:
        """Each call, in order, to the least-loaded prefill (or only) worker (the first such), as a
        length-only request; the loads are counted once and kept up to date as requests are added."""
        prefill = self.prefill
        loads = [self._load(e) for e in prefill]
        one = self._sampling(1) if self.decode else None
        rng = self._rng
        for call in calls:
            i = int(rng.integers(len(prefill))) if rng is not None and len(prefill) > 1 else loads.index(min(loads))
            e = prefill[i]
            if not e.has_unfinished():
                _idle(e, call.arrive_s)
            seq = Sequence(None, one or self._sampling(call.max_tokens), prompt_len=call.prompt_len,
                           arrival_s=call.arrive_s, user_data=call)
            e.add_sequence(seq)
            loads[i] = self._load(e)

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
        for e, sends_kv in self._kinds:
            if e is not skip:
                b = _bound(e)
                if sends_kv and b < float("inf"):
                    b += self._fixed_s
                if b < h:
                    h = b
        return None if h == float("inf") else h

    def advance(self, horizon: float | None) -> list[Sequence]:
        t_step, e = self._earliest_busy()
        if self._transfers and self._transfers[0][0] <= t_step:
            self._land(t_step)
            return []
        assert e is not None
        e.next_event_s = self._horizon(e, horizon)
        j = self._decode_index.get(id(e)) if self.first_token_steps else None
        if j is not None:
            t0, n0 = e.clock.now(), e.num_steps
        done = e.step_finished()
        if j is not None and e.num_steps > n0:  # the decode worker's step time now (the mean of this run of steps)
            self._step_s[j] = (e.clock.now() - t0) / (e.num_steps - n0)
        if not self.decode:
            return done
        if e in self.decode:
            if done and (self._handoffs or self._num_handoffs_to):
                self._dispatch(e.clock.now())  # slots and KV freed now: waiting handoffs may go
            return done
        out = []
        rng = self._rng
        for seq in done:  # prefill finished: queue the handoff to the decode pool
            call: Call = seq.user_data  # type: ignore[assignment]
            if call.max_tokens <= 1:
                out.append(seq)
                continue
            if rng is None:
                self._handoffs.append((float(seq.finish_s), e, seq))
            else:  # the router's pick for this request, whatever the workers' load
                self._handoffs_to[int(rng.integers(len(self.decode)))].append((float(seq.finish_s), e, seq))
                self._num_handoffs_to += 1
        self._dispatch(e.clock.now())
        return out

    def _land(self, t_step: float) -> None:
        """Hand every KV transfer that lands by ``t_step`` (the earliest busy worker's clock) to its decode
        worker, oldest first. While each lands on a worker that already has work, the cluster's clock
        (:meth:`now`) does not move and no call is due in between, so landing them in one event is what
        landing them one event each did; a landing on an idle worker ends the batch (its clock may lead)."""
        transfers, inbound_n, inbound_blocks = self._transfers, self._inbound_n, self._inbound_blocks
        while transfers and transfers[0][0] <= t_step:
            t, _, seq, j, held = heapq.heappop(transfers)
            dst = self.decode[j]
            idle = not dst.has_unfinished()
            busy_at = dst.clock.now() > t and not idle
            seen = dst.clock.now() if busy_at and (self.first_token_at_step or held) else t
            if not held and not idle and self.first_token_steps and self._step_s[j] > 0:
                # the loop takes it only ``first_token_steps`` iterations after the one that saw it: the request
                # stays inbound (its slot and KV held) until then
                take = seen + self.first_token_steps * self._step_s[j]
                self._step_wait_s += take - t
                heapq.heappush(transfers, (take, next(self._tick), seq, j, True))
                continue
            inbound_n[j] -= 1
            inbound_blocks[j] -= dst.block_manager.blocks_for(seq.prompt_len + 1)
            if idle:
                _idle(dst, t)
            if seen > t or held:
                # the decode worker's loop sees the landed KV only after the step in progress (its clock is that
                # step's end: the cluster cut its steps at this landing) and streams the first token then
                if not held:
                    self._step_wait_s += seen - t
                seq.first_token_s = seq.last_token_s = seen
            dst.add_sequence(seq)
            if idle:
                return

    @staticmethod
    def _waiting_held(d: Engine) -> int:
        """KV blocks the requests waiting in decode worker ``d`` will take at admission (prompt + first token)."""
        bm = d.block_manager
        return sum(bm.blocks_for(q.prompt_len + 1) for q in d.scheduler.waiting)

    def _dispatch(self, now: float) -> None:
        """Hand waiting prefilled requests, in arrival order, to the least-loaded decode worker (the first such)
        with room: a free sequence slot (``max_num_seqs``, counting its transfers inbound) and free KV blocks
        for the prompt and first token (after those its waiting requests and inbound transfers will take). A
        transfer starts when its KV is ready, or at ``now`` (when the room appeared) if it had to wait. The
        decode workers' queues, slots and free blocks do not change during one dispatch (only their inbound
        transfers), so they are read once."""
        if self._rng is not None:
            self._dispatch_routed(now)
            return
        if not self._handoffs:
            return
        handoffs, decode = self._handoffs, self.decode
        inbound_n, inbound_blocks = self._inbound_n, self._inbound_blocks
        load = [self._load(d) for d in decode]
        cap = [d.config.max_num_seqs for d in decode]
        free = [d.block_manager.num_free - self._waiting_held(d) for d in decode]
        bs = [d.block_manager.block_size for d in decode]
        order = range(len(decode))
        while handoffs:
            ready, src, seq = handoffs[0]
            plen = seq.prompt_len
            j, best = -1, 0
            for k in order:  # the least-loaded worker with room, the first of equals
                n = load[k] + inbound_n[k]
                if n < cap[k] and free[k] - inbound_blocks[k] >= -(-(plen + 1) // bs[k]) and (j < 0 or n < best):
                    j, best = k, n
            if j < 0:
                return
            handoffs.popleft()
            self._send(src, seq, j, ready, now)

    def _send(self, src: Engine, seq: Sequence, j: int, ready: float, now: float) -> None:
        """Start the KV transfer of prefilled ``seq`` (ready at ``ready``) from ``src`` to decode worker ``j`` at
        ``max(ready, now)``, counting its wait for room and its inbound slot and blocks."""
        start = max(ready, now)
        self._admission_wait_s += start - ready
        call: Call = seq.user_data  # type: ignore[assignment]
        plen = seq.prompt_len
        t = self._transfer(src, self.decode[j], start, plen)
        seq.hand_over(self._params.get(call.max_tokens) or self._sampling(call.max_tokens), t)
        heapq.heappush(self._transfers, (t, next(self._tick), seq, j, False))
        self._inbound_n[j] += 1
        self._inbound_blocks[j] += self.decode[j].block_manager.blocks_for(plen + 1)

    def _dispatch_routed(self, now: float) -> None:
        """Random routing: each decode worker takes the requests the router sent it, in order, while it has room
        (a free sequence slot counting its inbound transfers, and free KV blocks for the prompt and first token
        after its waiting and inbound requests'); a worker without room holds its queue (head of line)."""
        if not self._num_handoffs_to:
            return
        for j, q in enumerate(self._handoffs_to):
            if not q:
                continue
            d = self.decode[j]
            bm = d.block_manager
            load, cap = self._load(d), d.config.max_num_seqs
            free = bm.num_free - self._waiting_held(d)
            while q:
                ready, src, seq = q[0]
                if (load + self._inbound_n[j] >= cap
                        or free - self._inbound_blocks[j] < bm.blocks_for(seq.prompt_len + 1)):
                    break
                q.popleft()
                self._num_handoffs_to -= 1
                self._send(src, seq, j, ready, now)

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
        return tx[i] + self._fixed_s

    def kv_queue_s_mean(self) -> float:
        """Mean time a KV transfer waited for a busy link lane (0 when none waited)."""
        return self._queued_s / self._num_transfers if self._num_transfers else 0.0

    def admission_wait_s_mean(self) -> float:
        """Mean time a prefilled request waited for room in the decode pool (0 when none waited)."""
        return self._admission_wait_s / self._num_transfers if self._num_transfers else 0.0

    def step_wait_s_mean(self) -> float:
        """Mean time a landed KV waited for its decode worker's step in progress to end and, with
        ``first_token_steps``, for the loop iterations after it (0 when none did)."""
        return self._step_wait_s / self._num_transfers if self._num_transfers else 0.0

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


#: how a :class:`Cluster` routes requests to its workers (see the module docstring)
ROUTING = ("least-loaded", "random")


def _idle(e: Engine, t: float) -> None:
    dt = t - e.clock.now()
    if dt > 0:
        e.clock.wait_until(t)
        e.energy_j += e.backend.idle_power_w * dt
