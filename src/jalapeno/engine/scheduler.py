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

from collections import deque
from typing import Callable

import numpy as np

from jalapeno.engine.block_manager import BlockManager
from jalapeno.engine.config import EngineConfig
from jalapeno.engine.interface import ScheduledBatch, SeqChunk
from jalapeno.engine.sequence import FinishReason, Sequence, SeqStatus


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
        running_ = SeqStatus.RUNNING
        for seq in running[:]:  # a copy: preemption removes sequences from the end of `running`
            if seq.status is not running_:
                continue
            start = seq.num_computed_tokens
            out = seq.num_output_tokens
            if not out or start < seq.prompt_len + out - 1:
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
            kk = (min(seq.max_tokens - out, max_len - seq.prompt_len - out) - 1) // per + 1
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
                steps = self._multi_step(chunks, k_left, per)
        return ScheduledBatch(chunks, num_steps=steps, num_decodes=self._num_decodes)

    def _make_room(self, seq: Sequence, num_tokens: int, chunks: list[SeqChunk]) -> bool:
        """Preempt the newest running sequences until ``seq`` gets blocks for ``num_tokens`` tokens.
        Returns False when ``seq`` itself had to go. Drops the chunk of any victim scheduled this step."""
        while True:
            victim = self.running[-1]
            if victim is not seq:
                for j, c in enumerate(chunks):
                    if c.seq is victim:
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

    def _multi_step(self, chunks: list[SeqChunk], k: int, per_step: int) -> int:
        """Largest K <= k (no sequence can finish before step K) for which KV blocks for all K steps fit;
        reserves them. Step 1's blocks are already held."""
        bm = self.bm
        bs = bm.block_size
        free = bm.num_free
        # each sequence needs at most ceil((K-1)·per/bs) + 1 new blocks: if that fits, skip counting
        if len(chunks) * (-(-((k - 1) * per_step) // bs) + 1) <= free:
            bm.reserve_chunks(chunks, (k - 1) * per_step, known_to_fit=True)
            return k
        # Maybe short of blocks: the largest K whose blocks fit, by bisection, counting in numpy.
        n = len(chunks)
        ends = np.fromiter((c.start + c.num_tokens for c in chunks), np.int64, n)
        held = np.fromiter((c.seq.num_blocks for c in chunks), np.int64, n)

        def need(steps: int) -> int:
            return int(np.maximum(0, -(-(ends + (steps - 1) * per_step) // bs) - held).sum())

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
            bm.reserve_chunks(chunks, (lo - 1) * per_step, known_to_fit=True)
        return lo
