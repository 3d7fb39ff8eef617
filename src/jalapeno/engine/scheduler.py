"""Continuous batching with chunked prefill and preemption by recompute (vLLM v1 policy, nano-vllm size).

Each step, under a token budget (``max_num_batched_tokens``) and a sequence cap (``max_num_seqs``):

1. every running *decode* gets its ``1 + k`` tokens (k = speculative draft tokens), oldest first;
2. running sequences still prefilling get their next chunk, oldest first;
3. waiting sequences are admitted first-come-first-served with a prefill chunk of what budget is left
   (skipped in a step that had to preempt).

When a sequence cannot get the KV blocks it needs, the newest running sequence is preempted by recompute:
its blocks are freed and it goes back to the *front* of the waiting queue (it prefills prompt + output again).
With an offload tier (the block manager's ``offload_blocks``) that has room, the victim's computed KV moves
there instead and comes back when it is readmitted (the batch's ``loaded_tokens``, priced by the backend):
no recompute.

Serving-stack policies (``EngineConfig``, default off = the vLLM V1 policy above; a framework profile turns them
on, ``jalapeno.perf.frameworks.SchedulingPolicy``): ``separate_prefill`` — a step that prefills carries no decodes
(SGLang without mixed chunks: prefill batches run alone under ``max_prefill_tokens``, decode pauses);
``recv_interval`` — new requests reach the waiting queue only every that many decode steps or right after a step
that prefilled (SGLang ``--scheduler-recv-interval``), so they wait in an inbox meanwhile; ``balance_ranks`` —
attention-DP context balancing (TensorRT-LLM ``enable_balance``): while every rank decodes, admissions wait until
there is one waiting request per rank or ``balance_timeout_iters`` steps have passed since the last admission
round (the counter runs whether or not anything waits, as TensorRT-LLM's does).

Multi-step: when every chunk of a step samples (decodes, and prompts whose last chunk this is) and nothing
can change the batch for K steps — no completion (bounded with ``1 + k`` tokens per step), no admission
(nothing waits, or admission failed for lack of blocks or sequence slots, which persists while decoding),
and blocks for all K steps reserved up front — the batch asks for K steps at once: the scheduled step, then
K−1 decode steps of every sequence. The engine still cuts them at the next arrival (see ``engine.py``).

Simulation fast path: the oldest running sequences that only decode sit in a lockstep decode group
(``lockstep.py``) whose counters advance lazily; the scheduler handles them as a block — their chunks, the
sequences among them that need a new KV block, their fewest steps left and block needs per phase — and walks
only the rest of the batch. Decisions are exactly those of the per-sequence walk.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence as Seq

from jalapeno.engine.block_manager import BlockManager
from jalapeno.engine.config import EngineConfig
from jalapeno.engine.batch import ScheduledBatch, SeqChunk, StepResult
from jalapeno.engine.lockstep import DecodeGroup
from jalapeno.engine.sequence import FinishReason, RequestOutput, Sequence, SeqStatus
from jalapeno.engine.timing import LatencyRecorder, StepTiming

_WAITING, _RUNNING, _FINISHED = SeqStatus.WAITING, SeqStatus.RUNNING, SeqStatus.FINISHED


@dataclass(slots=True)
class StepUpdate:
    """What applying one batch's results changed: the sequences that finished (already out of ``running``),
    tokens generated, prompt tokens computed."""

    finished: list[Sequence] = field(default_factory=list)
    generated: int = 0
    prefilled: int = 0


class Scheduler:
    def __init__(
        self,
        config: EngineConfig,
        block_manager: BlockManager,
        on_free: Callable[[Sequence], None] | None = None,
    ) -> None:
        self.config = config
        self.bm = block_manager
        self.on_free = on_free
        self.waiting: deque[Sequence] = deque()
        #: arrivals not yet received (``recv_interval`` > 1 only)
        self.inbox: deque[Sequence] = deque()
        self._recv_count = 0  # decode steps since the last receive
        self._recv_next = True  # receive at the next schedule (the start, and after a step that prefilled)
        self._balance_count = 0  # ``balance_ranks``: steps since the last admission round
        self._balance_release = False  # the batch being run is an admission round (resets the count)
        #: ``balance_ranks``: each unfinished sequence's attention-DP rank, and per rank its sequences (running or
        #: waiting) and its waiting ones
        self._rank_of: dict[int | str, int] = {}
        self._rank_load = [0] * config.balance_ranks
        self._rank_waiting = [0] * config.balance_ranks
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self._num_decodes = 0  # decode chunks at the head of the batch being built
        self._loaded = 0  # KV tokens brought back from the offload tier for the batch being built
        #: the lockstep decode group (the head of ``running``), when sequences can join one: counting block
        #: manager, one token per step. The engine fills it; None makes every step walk the whole batch.
        self.group: DecodeGroup | None = None
        if not block_manager.track_ids and config.num_speculative_tokens == 0:
            self.group = DecodeGroup(block_manager.block_size)
        #: how many chunks at the head of the last batch are the group's
        self.num_grouped = 0
        #: neither ``recv_interval`` nor ``balance_ranks`` counts steps (what applying a group-only batch may skip)
        self._no_step_counts = config.recv_interval <= 1 and config.balance_ranks <= 1

    # --- queue management ---------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        seq.status = _WAITING
        (self.inbox if self.config.recv_interval > 1 else self.waiting).append(seq)
        if self.config.balance_ranks > 1:  # the attention-DP router: the rank with the fewest requests
            load = self._rank_load
            r = load.index(min(load))
            self._rank_of[seq.seq_id] = r
            load[r] += 1
            self._rank_waiting[r] += 1

    def _on_rank(self, seq: Sequence, waiting: int, load: int = 0) -> None:
        """``balance_ranks``: ``seq`` changes its rank's waiting count by ``waiting`` and its load by ``load``."""
        r = self._rank_of.get(seq.seq_id)
        if r is not None:
            self._rank_waiting[r] += waiting
            self._rank_load[r] += load
            if load < 0:
                del self._rank_of[seq.seq_id]

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.inbox)

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        """Mark ``seq`` finished and release its blocks (the caller removes it from ``running``)."""
        if self._rank_of:
            self._on_rank(seq, -1 if seq.status == _WAITING else 0, -1)
        seq.status = _FINISHED
        seq.finish_reason = reason
        # its reusable decode chunk refers back to it: drop it, or the pair would be a reference cycle that
        # only the cyclic garbage collector frees (at rack scale its full passes cost a fifth of the run)
        seq.decode_chunk = None
        bm = self.bm
        if seq.kv_key is not None and bm.offload_blocks:
            bm.retain(seq)
        bm.free(seq)
        if self.on_free is not None:
            self.on_free(seq)

    def abort(self, seq_id: int | str) -> Sequence | None:
        """Finish ``seq_id`` with reason ``abort`` and free its blocks now. None if unknown or finished."""
        if self.group is not None:
            self.group.dissolve()
        for i, s in enumerate(self.running):
            if s.seq_id == seq_id:
                del self.running[i]
                self.finish(s, "abort")
                return s
        for queue in (self.waiting, self.inbox):
            for s in queue:
                if s.seq_id == seq_id:
                    queue.remove(s)
                    self.finish(s, "abort")
                    return s
        return None

    def _preempt(self, seq: Sequence) -> None:
        if seq.group is not None:
            seq.group.release(seq)
        running = self.running
        if running[-1] is seq:  # the usual victim: the newest
            running.pop()
        else:
            running.remove(seq)
        if not (self.bm.offload_free and self.bm.offload(seq)):
            self.bm.free(seq)
            seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = SeqStatus.WAITING
        self.waiting.appendleft(seq)
        if self._rank_of:
            self._on_rank(seq, 1)
        self.num_preemptions += 1
        if self.on_free is not None:
            self.on_free(seq)

    # --- the policy ---------------------------------------------------------------------------------
    def schedule(self, max_steps: int = 1) -> ScheduledBatch | None:
        """Choose the next step's chunks (None when nothing can run). ``max_steps`` > 1 allows a multi-step
        batch (the backend's :attr:`~jalapeno.engine.interface.Backend.max_multi_step`).

        Chunks come decodes first (``batch.num_decodes`` of them), then prefill chunks. A running sequence's
        decode :class:`SeqChunk` is reused from step to step (its ``start`` updated): a batch's chunks are
        valid until the next call."""
        cfg = self.config
        if cfg.recv_interval > 1:
            max_steps = self._receive(max_steps)
        hold = False
        if cfg.balance_ranks > 1:
            hold, max_steps = self._balance(max_steps)
        if cfg.separate_prefill:
            batch = self._schedule_prefill_only(hold)
            if batch is not None:
                return batch
        per = 1 + cfg.num_speculative_tokens
        self._num_decodes = 0
        self._loaded = 0
        max_len = cfg.max_model_len if cfg.max_model_len is not None else 1 << 62
        # 1. running decodes, oldest first (the config guarantees the budget covers them all); k_left: fewest
        # steps any scheduled sequence can take before finishing (the multi-step bound)
        chunks, preempted, grouped, k_left = self._schedule_group(max_steps)
        partial: list[Sequence] = []  # running sequences still prefilling, for step 2
        if grouped < len(self.running):  # (none behind the group: nothing to walk, no call)
            decodes_preempted, k_left = self._schedule_decodes(chunks, grouped, per, k_left, max_len, partial)
            preempted = preempted or decodes_preempted
        budget = cfg.max_num_batched_tokens - per * len(chunks)
        # 2. running prefills (chunked), oldest first
        if partial:
            prefills_preempted, budget = self._schedule_prefills(partial, chunks, budget)
            preempted = preempted or prefills_preempted
        if preempted:  # victims' chunks were dropped: recount (decodes first, then prefill chunks)
            nd = self._num_decodes
            budget = cfg.max_num_batched_tokens - per * nd
            if len(chunks) > nd:  # (a group-only batch has no prefill chunk: no generator to sum none)
                budget -= sum(c.num_tokens for c in chunks[nd:])
        # 3. admissions, first come first served (none in a step that had to preempt)
        if preempted:
            admission_may_change = self._could_admit_next(per)
        elif hold or not self.waiting:  # hold: the batch ends at the release step (``_balance`` bounded it)
            admission_may_change = False
        else:
            admission_may_change = self._admit(chunks, budget)
        if not chunks:
            return None
        steps = 1
        if max_steps > 1 and k_left > 1 and not admission_may_change and len(chunks) == len(self.running):
            if grouped == len(chunks):  # the group alone (no prompt to check): what _num_steps would return
                steps = self._multi_step(chunks, k_left, per, grouped)
            else:
                steps = self._num_steps(chunks, k_left, per, max_len, grouped)
        self.num_grouped = grouped
        nd = self._num_decodes
        start_sum = None
        if grouped:
            start_sum = self.group.start_sum()  # type: ignore[union-attr]
            if nd > grouped:
                start_sum += sum(c.start for c in chunks[grouped:nd])
        # positional, in field order (chunks, num_steps, stop_at_s, start_s, num_decodes, decode_start_sum,
        # num_grouped, group, loaded_tokens): a dataclass's keyword call costs ≈ 1 µs more, once per event
        return ScheduledBatch(chunks, steps, None, 0.0, nd, start_sum, grouped, self.group if grouped else None,
                              self._loaded)

    def _receive(self, max_steps: int) -> int:
        """``recv_interval``: the stack receives new requests every ``recv_interval`` decode steps, right after
        a step that prefilled, and whenever nothing runs; arrivals in between wait in the inbox. Returns
        ``max_steps`` bounded so that a multi-step batch ends at the next receive while the inbox holds any.
        Receives that find the inbox empty change nothing but the phase: an arrival that cut a multi-step batch
        short (the engine stops it at the next arrival) waits for the next multiple of the interval."""
        if self._recv_next or not self.running:
            self._take_inbox()
        elif self.inbox:
            interval = self.config.recv_interval
            phase = self._recv_count % interval
            if phase == 0 and self._recv_count:
                self._take_inbox()
            else:
                self._recv_count = phase
        if not self.inbox:
            return max_steps
        return max(1, min(max_steps, self.config.recv_interval - self._recv_count))

    def _balance(self, max_steps: int) -> tuple[bool, int]:
        """``balance_ranks``: whether admissions wait this step (TensorRT-LLM ``_balance_adp_requests``), and
        ``max_steps`` bounded so a multi-step batch ends at the step that releases them. Each request is on the
        rank the router gave it on arrival (the one with the fewest requests, :meth:`add`). A step is an
        admission round (it resets the step count) when every rank has a waiting request, when some rank runs
        none (nothing to decode there), or when it is the ``balance_timeout_iters``-th step since the last round."""
        timeout = self.config.balance_timeout_iters
        phase = self._balance_count % timeout if timeout else 0
        waiting, load = self._rank_waiting, self._rank_load
        if min(waiting) > 0 or any(n == w for n, w in zip(load, waiting)) or phase >= timeout - 1:
            self._balance_release = True
            return False, max_steps
        if not self.waiting:
            return False, max_steps  # nothing to hold; the count still runs
        return True, max(1, min(max_steps, timeout - 1 - phase))

    def _take_inbox(self) -> None:
        self.waiting.extend(self.inbox)
        self.inbox.clear()
        self._recv_count = 0
        self._recv_next = False

    def _schedule_prefill_only(self, hold: bool = False) -> ScheduledBatch | None:
        """``separate_prefill``: a batch of prefill chunks only (running prompts first, then admissions unless
        ``hold``) under ``max_prefill_tokens``; None when there is nothing to prefill (then the step decodes)."""
        cfg = self.config
        group = self.group
        partial = [s for s in self.running[len(group) if group is not None else 0:]  # members only decode
                   if not s.num_output_tokens or s.num_computed_tokens < s.prompt_len + s.num_output_tokens - 1]
        if not partial and (hold or not (self.waiting and len(self.running) < cfg.max_num_seqs)):
            return None
        if self.group is not None and self.group.members:
            self.group.dissolve()  # the decodes pause: every sequence goes through the per-sequence walk
        self._num_decodes = 0
        self._loaded = 0
        chunks: list[SeqChunk] = []
        preempted, budget = self._schedule_prefills(partial, chunks, cfg.max_prefill_tokens or cfg.max_num_batched_tokens)
        if not preempted and not hold:
            self._admit(chunks, budget)
        if not chunks:
            return None
        self.num_grouped = 0
        return ScheduledBatch(chunks, num_steps=1, num_decodes=0, decode_start_sum=None,
                              loaded_tokens=self._loaded, num_grouped=0, group=None)

    def _schedule_group(self, k_left: int) -> tuple[list[SeqChunk], bool, int, int]:
        """The lockstep group's members (the head of ``running``) as a block: only those that cross into a new
        KV block are touched, and only when blocks run short (else they take them all at once). Returns the
        chunks so far, whether it preempted, how many chunks are the group's, and the multi-step bound."""
        group = self.group
        if group is None or not group.members:
            return [], False, 0, k_left
        bm = self.bm
        preempted = False
        chunks = group.chunks()
        crossing = group.crossing()
        if len(crossing) <= bm.num_free:
            bm.take(len(crossing))
        else:  # the oldest get the free blocks; then each preempts the newest sequences for its block
            preempted = True
            self._num_decodes = len(chunks)
            served = bm.num_free
            bm.take(served)
            rest = list(crossing)[served:]
            n = len(rest)
            for i, seq in enumerate(rest):
                if seq.group is None:
                    break  # preempted to make room for an older member (so is every newer one)
                free = bm.num_free
                if free:
                    # the victims are the newest members, so the crossers preempted are a tail of ``rest``: when
                    # the last is still a member, so is every one left, and the blocks serve them one by one as
                    # the loop would (none preempts)
                    if free >= n - i and rest[-1].group is not None:
                        bm.num_free = free - (n - i)
                        break
                    bm.num_free = free - 1  # bm.take(1), counting mode
                elif not self._make_room(seq, 0, chunks):
                    break
        group.ahead = 1
        grouped = self._num_decodes = len(group.members)
        if grouped:
            k_left = min(k_left, group.steps_left())
        return chunks, preempted, grouped, k_left

    def _schedule_decodes(
        self, chunks: list[SeqChunk], i: int, per: int, k_left: int, max_len: int, partial: list[Sequence]
    ) -> tuple[bool, int]:
        """Decode chunks for ``running[i:]`` (the sequences behind the group); sequences still prefilling go to
        ``partial``. Returns whether it preempted, and the multi-step bound."""
        bm = self.bm
        bs = bm.block_size
        running = self.running
        preempted = False
        nd = self._num_decodes
        # victims of preemption are always the newest (the end of `running`), never an earlier sequence,
        # so walking by index visits exactly the sequences still running
        while i < len(running):
            seq = running[i]
            i += 1
            start = seq.num_computed_tokens
            out = seq.num_output_tokens
            plen = seq.prompt_len
            if not out or start < plen + out - 1:
                partial.append(seq)
                continue
            if start + per > seq.num_blocks * bs and not bm.reserve(seq, start + per):
                preempted = True
                self._num_decodes = nd
                ok = self._make_room(seq, start + per, chunks)
                nd = self._num_decodes
                if not ok:
                    continue
            ch = seq.decode_chunk
            if ch is None:
                ch = seq.decode_chunk = SeqChunk(seq, start, per, True)
            else:
                ch.start = start
            chunks.append(ch)
            nd += 1
            # finishing *at* step K is fine, before it is not: (K-1)·per < tokens left
            left = seq.max_tokens
            if max_len - plen < left:
                left = max_len - plen
            left -= out
            kk = left if per == 1 else (left - 1) // per + 1
            if kk < k_left:
                k_left = kk
        self._num_decodes = nd
        return preempted, k_left

    def _schedule_prefills(self, partial: list[Sequence], chunks: list[SeqChunk], budget: int) -> tuple[bool, int]:
        """The next prefill chunk of each running sequence in ``partial`` while ``budget`` tokens last. Returns
        whether it preempted, and the budget left."""
        bm = self.bm
        bs = bm.block_size
        preempted = False
        for seq in partial:
            if budget <= 0:
                break
            if seq.status is not SeqStatus.RUNNING:  # preempted above
                continue
            start = seq.num_computed_tokens
            total = seq.prompt_len + seq.num_output_tokens
            n = min(total - start, budget)
            if -(-(start + n) // bs) > seq.num_blocks and not bm.reserve(seq, start + n):
                preempted = True
                if not self._make_room(seq, start + n, chunks):
                    continue
            chunks.append(SeqChunk(seq, start, n, start + n >= total))
            budget -= n
        return preempted, budget

    def _admit(self, chunks: list[SeqChunk], budget: int) -> bool:
        """Admit waiting sequences, first come first served, with a prefill chunk of what ``budget`` is left.
        Returns whether admission could change in a later step of a multi-step batch (budget or chunking
        stopped it, not blocks or sequence slots, which stay short while decoding)."""
        cfg = self.config
        bm = self.bm
        running = self.running
        waiting = self.waiting
        max_seqs, chunked = cfg.max_num_seqs, cfg.enable_chunked_prefill
        prefix, reserve = bm.prefix_caching, bm.reserve
        while waiting and len(running) < max_seqs:
            if budget <= 0:
                return True
            seq = waiting[0]
            start = seq.num_computed_tokens
            if seq.num_blocks == 0 and start == 0:
                if prefix:  # (match_prefix finds nothing without prefix caching)
                    bm.match_prefix(seq)
                if bm.retained:
                    bm.match_retained(seq)
                start = seq.num_computed_tokens
            total = seq.prompt_len + seq.num_output_tokens
            left = total - start
            n = left if left < budget else budget
            if n < left and not chunked:
                return True
            if not reserve(seq, start + n):
                break  # free blocks only shrink until something finishes
            waiting.popleft()
            if self._rank_of:
                self._on_rank(seq, -1)
            if seq.offloaded_tokens:
                self._loaded += bm.restore(seq)
            seq.status = _RUNNING
            running.append(seq)
            chunks.append(SeqChunk(seq, start, n, start + n >= total))
            budget -= n
        return False

    def _num_steps(self, chunks: list[SeqChunk], k_left: int, per: int, max_len: int, grouped: int) -> int:
        """Steps the batch may take at once: 1 unless every prompt finishes its prefill now and no sequence
        can finish before step ``k_left`` (then what :meth:`_multi_step` reserves)."""
        for c in chunks[self._num_decodes :]:  # the prompts: every one must finish its prefill now
            seq = c.seq
            if not c.sample:
                return 1
            out = seq.num_output_tokens
            k_left = min(k_left, (min(seq.max_tokens - out, max_len - seq.prompt_len - out) - 1) // per + 1)
        if k_left > 1:
            return self._multi_step(chunks, k_left, per, grouped)
        return 1

    def _make_room(self, seq: Sequence, num_tokens: int, chunks: list[SeqChunk]) -> bool:
        """Preempt the newest running sequences until ``seq`` gets blocks for ``num_tokens`` tokens (a group
        member: the one new block it needs). Returns False when ``seq`` itself had to go. Drops the chunk of
        any victim scheduled this step (a member's is scheduled before it is reached)."""
        member = seq.group is not None
        group = self.group
        while True:
            victim = self.running[-1]
            if victim is not seq or member:  # a sequence has at most one chunk; the newest's is near the end
                # (members' chunks come first, so a non-member's is not among them)
                lo = 0 if victim.group is not None or group is None else len(group)
                for j in range(len(chunks) - 1, lo - 1, -1):
                    if chunks[j].seq is victim:
                        del chunks[j]
                        if j < self._num_decodes:
                            self._num_decodes -= 1
                        if victim.group is not None:  # the group's lent list: it keeps in step
                            victim.group.chunk_deleted(victim, j)
                        break
            self._preempt(victim)
            if victim is seq:
                return False
            if member:
                if self.bm.num_free:
                    self.bm.take(1)
                    return True
            elif self.bm.reserve(seq, num_tokens):
                return True

    def _could_admit_next(self, per_decode: int) -> bool:
        """After a step that preempted (and so admitted nothing): could the next step admit the head of the
        queue, if the running batch stays as it is? Free blocks only shrink meanwhile, so False stays False."""
        cfg = self.config
        if not self.waiting or len(self.running) >= cfg.max_num_seqs:
            return False
        seq = self.waiting[0]
        start = seq.num_computed_tokens
        left = seq.num_tokens - start
        n = min(left, cfg.max_num_batched_tokens - per_decode * len(self.running))
        if n <= 0 or (n < left and not cfg.enable_chunked_prefill):
            return False
        return self.bm.blocks_needed(seq, start + n) <= self.bm.num_free

    def _multi_step(self, chunks: list[SeqChunk], k: int, per_step: int, grouped: int) -> int:
        """Largest K <= k (no sequence can finish before step K) for which KV blocks for all K steps fit;
        reserves them. Step 1's blocks are already held. ``chunks[:grouped]`` are the lockstep group's."""
        bm = self.bm
        bs = bm.block_size
        free = bm.num_free
        if grouped == len(chunks):  # the group alone (a KV-bound run's usual batch): nothing behind it to count or
            # reserve for; the general path below with its walks over no chunk left out (the same K, the same blocks)
            group = self.group
            assert group is not None and k > 1
            x = (k - 1) * per_step
            if grouped * (-(-x // bs) + 1) > free:
                rounds, rem = divmod(free, grouped)
                k = min(k, (rounds * bs + group.slack_cut(rem)) // per_step + 1)
                x = (k - 1) * per_step
            if k > 1:
                bm.take(group.blocks_for(x))
                group.ahead += x
            return k
        group = self.group if grouped else None
        rest = chunks[grouped:]
        # each sequence needs at most ceil((K-1)·per/bs) + 1 new blocks: if that fits, skip counting
        if len(chunks) * (-(-((k - 1) * per_step) // bs) + 1) <= free:
            self._reserve_ahead(rest, None, (k - 1) * per_step)
            return k
        # Maybe short of blocks: the largest K whose blocks fit. A chunk ending at e with h blocks held needs
        # max(0, ceil((x − s)/bs)) more for x = (K−1)·per extra tokens, s = h·bs − e its slack; so need(x)
        # only depends on how many chunks share each slack (a few distinct values): count them once.
        if group is not None:
            cut = self._group_slack_cut(group, rest, free, len(chunks))
            if cut is not None:
                return self._fit(rest, None, min(k, cut // per_step + 1), per_step)  # type: ignore[arg-type]
        group_slacks = group.slack_counts() if group is not None else []
        counts = dict(group_slacks)  # one slack per phase: distinct
        for c in rest:
            sl = c.seq.num_blocks * bs - c.start - c.num_tokens
            counts[sl] = counts.get(sl, 0) + 1
        groups = sorted(counts.items())
        if 0 <= groups[0][0] and groups[-1][0] < bs:
            # slacks below bs: need(r·bs + t) = r·n + Σ_{s < t} count(s) for 0 <= t < bs (n chunks), so the
            # largest x that fits is r·bs + t with r = free // n and t the last offset within the remainder
            rounds, rem = divmod(free, len(chunks))
            taken = 0
            for sl, cnt in groups:
                if taken + cnt > rem:
                    break
                taken += cnt
            x_max = rounds * bs + sl
            return self._fit(rest, group_slacks, min(k, x_max // per_step + 1), per_step)

        def need(steps: int) -> int:
            x = (steps - 1) * per_step
            total = 0
            for sl, cnt in groups:
                if sl >= x:
                    break
                total += cnt * -((sl - x) // bs)
            return total

        if need(k) <= free:
            return self._fit(rest, group_slacks, k, per_step)
        lo, hi = 1, k  # need(lo) fits (step 1 is reserved), need(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if need(mid) <= free:
                lo = mid
            else:
                hi = mid
        return self._fit(rest, group_slacks, lo, per_step)

    def _group_slack_cut(self, group: DecodeGroup, rest: list[SeqChunk], free: int, n: int) -> int | None:
        """:meth:`_multi_step`'s largest fitting look-ahead ``x`` (tokens) when every slack is below the block
        size, walking the group's slacks in ascending order (:meth:`DecodeGroup.slack_cut`) instead of listing,
        merging and sorting every phase; ``rest``'s slacks (the chunks behind the group) are merged in. None when
        one of them is outside ``[0, bs)`` (the caller's general count then decides)."""
        bs = self.bm.block_size
        extra: dict[int, int] = {}
        for c in rest:
            sl = c.seq.num_blocks * bs - c.start - c.num_tokens
            if not 0 <= sl < bs:
                return None
            extra[sl] = extra.get(sl, 0) + 1
        rounds, rem = divmod(free, n)
        return rounds * bs + group.slack_cut(rem, extra)

    def _fit(self, rest: list[SeqChunk], group_slacks: list[tuple[int, int]], steps: int, per_step: int) -> int:
        """Reserve blocks for ``steps`` steps (known to fit) and return ``steps``. ``rest``: the chunks outside
        the group; ``group_slacks``: the group's (slack, members) pairs."""
        if steps > 1:
            self._reserve_ahead(rest, group_slacks, (steps - 1) * per_step)
        return steps

    def _reserve_ahead(self, chunks: list[SeqChunk], group_slacks: list[tuple[int, int]] | None, extra: int) -> None:
        """Blocks for ``extra`` more tokens for every chunk's sequence and every group member (known to fit).
        ``group_slacks``: the group's (slack, members) pairs, None to count them here."""
        if chunks:
            self.bm.reserve_chunks(chunks, extra, known_to_fit=True)
        group = self.group
        if group is not None and group.members:
            self.bm.take(group.blocks_for(extra, group_slacks))
            group.ahead += extra

    # --- applying a step's results (vLLM v1 ``update_from_output``, nano-vllm ``Scheduler.postprocess``) ------
    def update_from_output(
        self,
        batch: ScheduledBatch,
        result: StepResult,
        timing: StepTiming,
        latency: LatencyRecorder,
        outputs: list[RequestOutput] | None = None,
    ) -> StepUpdate:
        """Apply what the backend returned for ``batch`` (``timing``: when its tokens came): advance each
        sequence's counters (and token ids), record inter-token gaps in ``latency``, finish sequences that hit
        a stop token, ``max_tokens`` or ``max_model_len``, give back blocks reserved for rejected draft tokens
        or cut-off steps, and let decodes join the lockstep group. ``outputs``: append one
        :class:`RequestOutput` per sampled chunk (the per-request path; ``None`` for the simulator)."""
        g = self.num_grouped
        if g == len(batch.chunks) and g and self._no_step_counts:
            # the lockstep group alone (a KV-bound run's usual batch): the members advance, nothing else is applied
            # (the general path below with no chunk behind the group to walk: the same updates in the same order)
            assert result.token_counts is None or result.counts_skip <= g, "only the group's counts may be left out"
            up = StepUpdate()
            self._advance_group(g, timing, self.config.num_speculative_tokens > 0 or timing.num_steps < batch.num_steps,
                                up)
            latency.add(timing.t_first - timing.t0, g)
            if up.finished:
                _drop_finished(self.running, up.finished, self.group.left_at)  # type: ignore[union-attr]
            return up
        counts = result.token_counts
        skip = 0  # counts[j] is chunk skip + j's (the group's members may be left out: they gain a token a step)
        if counts is None:
            counts = [len(t) for t in result.tokens]
        else:
            skip = result.counts_skip
            assert skip <= self.num_grouped, "only the lockstep group's token counts may be left out"
        tokens = result.tokens if result.tokens else None
        nd = batch.num_decodes
        trim = self.config.num_speculative_tokens > 0 or timing.num_steps < batch.num_steps
        up = StepUpdate()
        common = 0  # sequences whose previous token came at t0 (their first gap is t_first - t0)
        first = self.num_grouped
        if first:
            common += self._advance_group(first, timing, trim, up)
        fast = nd and tokens is None and outputs is None and not self.bm.prefix_caching
        if fast:
            if nd > first:
                common += self._count_decodes(batch.chunks[first:nd], counts[first - skip : nd - skip], timing, trim,
                                              up, latency)
            first = nd
        if first < len(batch.chunks):
            common += self._apply_chunks(batch, first, counts, tokens, timing, trim, up, latency, outputs, skip)
        if common:
            latency.add(timing.t_first - timing.t0, common)
        group = self.group
        if up.finished:
            grouped = self.num_grouped and group is not None
            _drop_finished(self.running, up.finished, group.left_at if grouped else ())  # type: ignore[union-attr]
        if fast and group is not None and nd > self.num_grouped:
            self._regroup(batch.chunks, nd)
        if self.config.recv_interval > 1:  # a step that prefilled ends the receive interval
            if up.prefilled:
                self._recv_next = True
            else:
                self._recv_count += timing.num_steps
        if self.config.balance_ranks > 1:  # an admission round's step counts 0, every later step one more
            self._balance_count = timing.num_steps - 1 if self._balance_release else self._balance_count + timing.num_steps
            self._balance_release = False
        return up

    def _advance_group(self, members: int, timing: StepTiming, trim: bool, up: StepUpdate) -> int:
        """The lockstep group (the batch's head): each member gained one token per step and sampled at t0.
        Returns how many sampled at t0 (all of them)."""
        group = self.group
        assert group is not None and not self.config.num_speculative_tokens
        up.generated += members * timing.num_steps
        t_last = timing.t_last
        for seq in group.advance(timing.num_steps, t_last):
            seq.finish_s = t_last
            self.finish(seq, "length")
            up.finished.append(seq)
        if trim:
            self.bm.give(group.trim())
        return members

    def _count_decodes(
        self, chunks: list[SeqChunk], counts: Seq[int], timing: StepTiming, trim: bool, up: StepUpdate,
        latency: LatencyRecorder,
    ) -> int:
        """The simulator's fast path over decode chunks outside the group: counters only, no token ids.
        Returns how many sampled at t0."""
        t0, t_first, t_last = timing.t0, timing.t_first, timing.t_last
        bm = self.bm
        bs = bm.block_size
        max_len = self.config.max_model_len
        itl_v, itl_c = latency.values, latency.counts
        finished = up.finished
        generated = common = 0
        for c, new in zip(chunks, counts):
            seq = c.seq
            out = seq.num_output_tokens + new
            mt = seq.max_tokens
            if out > mt:
                new -= out - mt
                out = mt
            seq.num_output_tokens = out
            plen = seq.prompt_len
            comp = seq.num_computed_tokens = plen + out - 1
            generated += new
            last = seq.last_token_s
            if last == t0:
                common += 1
            else:
                itl_v.append(t_first - last)  # type: ignore[operator]
                itl_c.append(1)
            seq.last_token_s = t_last
            if out == mt or plen + out >= max_len:  # type: ignore[operator]
                seq.finish_s = t_last
                self.finish(seq, "length")
                finished.append(seq)
                continue
            if trim and seq.num_blocks * bs >= comp + bs:  # holds a block beyond its computed tokens
                bm.trim(seq, comp)
        up.generated += generated
        return common

    def _apply_chunks(
        self, batch: ScheduledBatch, first: int, counts: Seq[int], tokens: list[list[int]] | None,
        timing: StepTiming, trim: bool, up: StepUpdate, latency: LatencyRecorder,
        outputs: list[RequestOutput] | None, skip: int = 0,
    ) -> int:
        """The general path over ``batch.chunks[first:]``: prefill chunks, token ids, stop tokens, outputs
        (``counts[i - skip]``: chunk ``i``'s tokens). Returns how many sampled at t0."""
        t0, t_first, t_last = timing.t0, timing.t_first, timing.t_last
        chunks = batch.chunks
        nd = batch.num_decodes
        bm = self.bm
        prefix = bm.prefix_caching
        max_len = self.config.max_model_len
        common = 0
        for i in range(first, len(chunks)):
            c = chunks[i]
            seq = c.seq
            out = seq.num_output_tokens
            if i >= nd:
                up.prefilled += c.num_tokens
            new = counts[i - skip]
            if not new:  # a prefill chunk that does not end the prompt
                seq.num_computed_tokens = c.start + c.num_tokens
                if prefix:
                    bm.register_full_blocks(seq)
                continue
            new = min(new, seq.max_tokens - out)
            reason: FinishReason | None = None
            new_ids: list[int] = []
            if tokens is not None and seq.output_token_ids is not None:
                new_ids, new, reason = _take_until_stop(seq, tokens[i][:new], new)
                seq.output_token_ids.extend(new_ids)
            seq.num_output_tokens = out = out + new
            seq.num_computed_tokens = seq.prompt_len + out - 1  # all but the newest token are in the cache
            if prefix:
                bm.register_full_blocks(seq)
            up.generated += new
            last = seq.last_token_s
            if last == t0:
                common += 1
            elif last is None:
                seq.first_token_s = t_first
            else:
                latency.add(t_first - last)
            seq.last_token_s = t_last
            if reason is None and (out >= seq.max_tokens or (max_len is not None and seq.prompt_len + out >= max_len)):
                reason = "length"
            if reason is not None:
                seq.finish_s = t_last
                self.finish(seq, reason)
                up.finished.append(seq)
            elif trim:
                # drop blocks reserved for rejected draft tokens or for steps cut off at an arrival
                bm.trim(seq, seq.num_computed_tokens)
            if outputs is not None:
                done = reason is not None
                outputs.append(RequestOutput(seq.seq_id, new_ids, new, done, seq.finish_reason if done else None,
                                             out, seq.prompt_len))
        return common

    def _regroup(self, chunks: list[SeqChunk], nd: int) -> None:
        """The decodes behind the group join it, in running order, once they hold exactly the blocks of their
        computed tokens (a prompt that just finished may hold one more: it joins a step later)."""
        group = self.group
        assert group is not None
        running = self.running
        members = group.members
        bs = self.bm.block_size
        max_len = self.config.max_model_len
        for c in chunks[self.num_grouped : nd]:
            seq = c.seq
            if seq.status is _FINISHED:
                continue
            n = len(members)
            if running[n] is not seq or seq.num_blocks != -(-seq.num_computed_tokens // bs):
                break
            group.join(seq, min(seq.max_tokens, max_len - seq.prompt_len))  # type: ignore[operator]


def _drop_finished(running: list[Sequence], finished: list[Sequence], at: Seq[int] = ()) -> None:
    """Remove ``finished`` from ``running`` (order kept). ``at``: the indices in ``running`` of the first
    ``len(at)`` of them, when known (the lockstep group's members: it knows where each sat), checked by
    identity and deleted by index; the rest (or all, if an index is wrong) are removed one by one."""
    k = len(at)
    if k and k <= len(finished) and _at_indices(running, at, finished):
        for i in sorted(at, reverse=True):
            del running[i]
        finished = finished[k:]
    for seq in finished:
        running.remove(seq)


def _at_indices(running: list[Sequence], at: Seq[int], finished: list[Sequence]) -> bool:
    """Whether ``running[at[j]] is finished[j]`` for every ``j`` (a loop: cheaper than ``all`` over a generator
    for the few members that finish at once)."""
    n = len(running)
    for i, s in zip(at, finished):
        if not 0 <= i < n or running[i] is not s:
            return False
    return True


def _take_until_stop(seq: Sequence, ids: list[int], new: int) -> tuple[list[int], int, FinishReason | None]:
    """The first ``new`` sampled ids of ``seq``, cut after its first stop token (unless ``ignore_eos``)."""
    new_ids = list(ids)
    sp = seq.sampling
    if sp.stop_token_ids and not sp.ignore_eos:
        for j, tok in enumerate(new_ids):
            if tok in sp.stop_token_ids:
                return new_ids[: j + 1], j + 1, "stop"
    return new_ids, new, None
