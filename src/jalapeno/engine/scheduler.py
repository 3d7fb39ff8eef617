"""Continuous batching with chunked prefill and preemption by recompute (vLLM v1 policy, nano-vllm size).

Each step, under a token budget (``max_num_batched_tokens``) and a sequence cap (``max_num_seqs``):

1. every running *decode* gets its ``1 + k`` tokens (k = speculative draft tokens), oldest first;
2. running sequences still prefilling get their next chunk, oldest first;
3. waiting sequences are admitted first-come-first-served with a prefill chunk of what budget is left
   (skipped in a step that had to preempt).

When a sequence cannot get the KV blocks it needs, the newest running sequence is preempted by recompute:
its blocks are freed and it goes back to the *front* of the waiting queue (it prefills prompt + output again).

Multi-step: when every chunk of a step samples (decodes, and prompts whose last chunk this is) and nothing
can change the batch for K steps — no completion (bounded with ``1 + k`` tokens per step), no admission
(nothing waits, or admission failed for lack of blocks or sequence slots, which persists while decoding),
and blocks for all K steps reserved up front — the batch asks for K steps at once: the scheduled step, then
K−1 decode steps of every sequence. The engine still cuts them at the next arrival (see ``engine.py``).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Callable

from jalapeno.engine.block_manager import BlockManager
from jalapeno.engine.config import EngineConfig
from jalapeno.engine.interface import ScheduledBatch, SeqChunk
from jalapeno.engine.sequence import FinishReason, Sequence, SeqStatus


@dataclass(slots=True)
class DecodeHint:
    """Step 1's decode walk, prepared by the engine while it applied the previous step (simulation only).

    Valid when that step ran every running sequence and all of them decode: then the running list is exactly
    the surviving chunks' sequences, in order. ``chunks`` are their decode chunks with ``start`` already
    advanced; ``needs`` the indices of those that must take a new KV block this step (oldest first);
    ``steps_left[i]`` the steps chunk i can take before it finishes; ``slacks[i]`` the token room of its
    blocks after this step's reservation (what :meth:`Scheduler._multi_step` counts). The scheduler then
    touches only the sequences that need a block instead of walking the whole batch."""

    chunks: list[SeqChunk]
    needs: list[int]
    steps_left: list[int]
    slacks: list[int]


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
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self._num_decodes = 0  # decode chunks at the head of the batch being built
        #: set by the engine after a step (counting block manager only); consumed by the next schedule
        self.hint: DecodeHint | None = None
        #: whether the last batch was every running sequence, all decoding (so a hint can be prepared)
        self.hint_wanted = False
        #: False makes every step walk the whole batch (tests compare both ways)
        self.use_hints = True

    # --- queue management ---------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        """Mark ``seq`` finished and release its blocks (the caller removes it from ``running``)."""
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = reason
        self.bm.free(seq)
        if self.on_free is not None:
            self.on_free(seq)

    def abort(self, seq_id: int | str) -> Sequence | None:
        """Finish ``seq_id`` with reason ``abort`` and free its blocks now. None if unknown or finished."""
        self.hint = None
        for i, s in enumerate(self.running):
            if s.seq_id == seq_id:
                del self.running[i]
                self.finish(s, "abort")
                return s
        for s in self.waiting:
            if s.seq_id == seq_id:
                self.waiting.remove(s)
                self.finish(s, "abort")
                return s
        return None

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.bm.free(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = SeqStatus.WAITING
        self.waiting.appendleft(seq)
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
        bm = self.bm
        bs = bm.block_size
        running = self.running
        per = 1 + cfg.num_speculative_tokens
        chunks: list[SeqChunk] = []
        self._num_decodes = 0
        preempted = False
        #: fewest steps any scheduled sequence can take before finishing (multi-step bound)
        k_left = max_steps
        max_len = cfg.max_model_len if cfg.max_model_len is not None else 1 << 62

        # 1. running decodes, oldest first (the config guarantees the budget covers them all)
        partial: list[Sequence] = []  # running sequences still prefilling, for step 2
        nd = 0
        # victims of preemption are always the newest (the end of `running`), never an earlier sequence,
        # so walking by index visits exactly the sequences still running
        plen_cap = max_len  # limit on prompt + output
        i = 0
        hint, self.hint = self.hint, None
        slacks: list[int] | None = None
        if hint is not None and len(hint.chunks) == len(running):
            # the same walk, touching only the sequences that cross into a new block (see DecodeHint)
            i = len(running)
            chunks = hint.chunks
            nd = self._num_decodes = len(chunks)
            for j in hint.needs:
                if j >= len(chunks):
                    break  # preempted to make room for an older sequence
                seq = chunks[j].seq
                start = seq.num_computed_tokens
                if not bm.reserve(seq, start + per):
                    preempted = True
                    if not self._make_room(seq, start + per, chunks):
                        del chunks[j:]  # it was the newest: its own chunk goes (nothing follows it)
                        self._num_decodes = j
                        break
            nd = self._num_decodes
            if nd:
                kk = min(hint.steps_left[:nd])
                if kk < k_left:
                    k_left = kk
            slacks = hint.slacks[:nd]
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
            if plen_cap - plen < left:
                left = plen_cap - plen
            left -= out
            kk = left if per == 1 else (left - 1) // per + 1
            if kk < k_left:
                k_left = kk
        self._num_decodes = nd
        budget = cfg.max_num_batched_tokens - per * len(chunks)

        # 2. running prefills (chunked), oldest first
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
        if preempted:  # victims' chunks were dropped: recount (decodes first, then prefill chunks)
            nd = self._num_decodes
            budget = cfg.max_num_batched_tokens - per * nd - sum(c.num_tokens for c in chunks[nd:])

        # 3. admissions, first come first served (none in a step that had to preempt)
        admission_may_change = preempted and self._could_admit_next(per)
        if not preempted:
            waiting = self.waiting
            while waiting and len(running) < cfg.max_num_seqs:
                if budget <= 0:
                    admission_may_change = True
                    break
                seq = waiting[0]
                if seq.num_blocks == 0 and seq.num_computed_tokens == 0:
                    bm.match_prefix(seq)
                start = seq.num_computed_tokens
                left = seq.num_tokens - start
                n = min(left, budget)
                if n < left and not cfg.enable_chunked_prefill:
                    admission_may_change = True
                    break
                if not bm.reserve(seq, start + n):
                    break  # free blocks only shrink until something finishes
                waiting.popleft()
                seq.status = SeqStatus.RUNNING
                running.append(seq)
                chunks.append(SeqChunk(seq, start, n, start + n >= seq.num_tokens))
                budget -= n

        if not chunks:
            return None
        steps = 1
        if max_steps > 1 and k_left > 1 and not admission_may_change and len(chunks) == len(running):
            for c in chunks[self._num_decodes :]:  # the prompts: every one must finish its prefill now
                seq = c.seq
                if not c.sample:
                    k_left = 1
                    break
                out = seq.num_output_tokens
                k_left = min(k_left, (min(seq.max_tokens - out, max_len - seq.prompt_len - out) - 1) // per + 1)
            if k_left > 1:
                steps = self._multi_step(chunks, k_left, per, slacks if len(chunks) == nd else None)
        self.hint_wanted = (
            self._num_decodes == len(chunks) == len(running) and not bm.track_ids and self.use_hints
        )
        return ScheduledBatch(chunks, num_steps=steps, num_decodes=self._num_decodes)

    def _make_room(self, seq: Sequence, num_tokens: int, chunks: list[SeqChunk]) -> bool:
        """Preempt the newest running sequences until ``seq`` gets blocks for ``num_tokens`` tokens.
        Returns False when ``seq`` itself had to go. Drops the chunk of any victim scheduled this step."""
        while True:
            victim = self.running[-1]
            if victim is not seq:  # a sequence has at most one chunk; the newest's is near the end
                for j in range(len(chunks) - 1, -1, -1):
                    if chunks[j].seq is victim:
                        del chunks[j]
                        if j < self._num_decodes:
                            self._num_decodes -= 1
                        break
            self._preempt(victim)
            if victim is seq:
                return False
            if self.bm.reserve(seq, num_tokens):
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

    def _multi_step(self, chunks: list[SeqChunk], k: int, per_step: int, slacks: list[int] | None = None) -> int:
        """Largest K <= k (no sequence can finish before step K) for which KV blocks for all K steps fit;
        reserves them. Step 1's blocks are already held. ``slacks``: each chunk's ``num_blocks·bs − start −
        num_tokens`` when the caller already has them."""
        bm = self.bm
        bs = bm.block_size
        free = bm.num_free
        # each sequence needs at most ceil((K-1)·per/bs) + 1 new blocks: if that fits, skip counting
        if len(chunks) * (-(-((k - 1) * per_step) // bs) + 1) <= free:
            bm.reserve_chunks(chunks, (k - 1) * per_step, known_to_fit=True, slacks=slacks)
            return k
        # Maybe short of blocks: the largest K whose blocks fit, by bisection. A chunk ending at e with h blocks
        # held needs max(0, ceil((x − s)/bs)) more for x = (K−1)·per extra tokens, s = h·bs − e its slack; so
        # need(K) only depends on how many chunks share each slack (a few distinct values): count them once.
        if slacks is None:
            slacks = [c.seq.num_blocks * bs - c.start - c.num_tokens for c in chunks]
        groups = sorted(Counter(slacks).items())

        def need(steps: int) -> int:
            x = (steps - 1) * per_step
            total = 0
            for sl, cnt in groups:
                if sl >= x:
                    break
                total += cnt * -((sl - x) // bs)
            return total

        if need(k) <= free:
            lo = k
        else:
            lo, hi = 1, k  # need(lo) fits (step 1 is reserved), need(hi) does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if need(mid) <= free:
                    lo = mid
                else:
                    hi = mid
        if lo > 1:
            bm.reserve_chunks(chunks, (lo - 1) * per_step, known_to_fit=True, slacks=slacks)
        return lo
