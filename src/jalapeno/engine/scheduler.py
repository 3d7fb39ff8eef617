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

import heapq
from collections import deque
from typing import Callable

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

        A running sequence's decode :class:`SeqChunk` is reused from step to step (its ``start`` updated):
        a batch's chunks are valid until the next call."""
        cfg = self.config
        bm = self.bm
        bs = bm.block_size
        running = self.running
        per_decode = 1 + cfg.num_speculative_tokens
        budget = cfg.max_num_batched_tokens
        chunks: list[SeqChunk] = []
        preempted = False
        max_len = cfg.max_model_len

        for want_decode in (True, False):
            i = 0
            while i < len(running) and budget > 0:
                seq = running[i]
                i += 1
                start = seq.num_computed_tokens
                out = seq.num_output_tokens
                decoding = out > 0 and start >= seq.prompt_len + out - 1
                if decoding is not want_decode:
                    continue
                n = per_decode if decoding else min(seq.prompt_len + out - start, budget)
                if -(-(start + n) // bs) > seq.num_blocks:
                    while not bm.reserve(seq, start + n):
                        victim = running[-1]
                        if victim is not seq:
                            for j, c in enumerate(chunks):  # a decode scheduled earlier in this step
                                if c.seq is victim:
                                    budget += c.num_tokens
                                    del chunks[j]
                                    break
                        self._preempt(victim)
                        preempted = True
                        if victim is seq:
                            break
                    if seq.status is not SeqStatus.RUNNING:
                        i -= 1
                        continue
                if decoding:
                    ch = seq.decode_chunk
                    if ch is None:
                        ch = seq.decode_chunk = SeqChunk(seq, start, n, True)
                    else:
                        ch.start = start
                    chunks.append(ch)
                else:
                    chunks.append(SeqChunk(seq, start, n, start + n >= seq.prompt_len + out))
                budget -= n

        admission_may_change = False
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
        if (
            max_steps > 1
            and not preempted
            and not admission_may_change
            and len(chunks) == len(running)
            and (max_len is None or all(c.seq.num_tokens + max_steps * per_decode < max_len for c in chunks))
        ):
            steps = self._multi_step(chunks, max_steps, per_decode)
        return ScheduledBatch(chunks, num_steps=steps)

    def _multi_step(self, chunks: list[SeqChunk], max_steps: int, per_step: int) -> int:
        """Largest K <= max_steps such that the batch stays the same for K steps: every chunk samples (step 1
        may finish prompts; steps 2..K decode every sequence), none can finish before step K (at most
        ``per_step`` tokens a step), and KV blocks for all K steps fit. Reserves those blocks."""
        k = max_steps
        for c in chunks:
            if not c.sample:
                return 1
            seq = c.seq
            # finishing *at* step K is fine, before it is not: (K-1)·per_step < tokens left
            kk = (seq.max_tokens - seq.num_output_tokens - 1) // per_step + 1
            if kk < k:
                k = kk
                if k <= 1:
                    return 1
        bm = self.bm
        if bm.reserve_chunks(chunks, (k - 1) * per_step):
            return k
        # Short of blocks. Sequence i needs its first extra block at step K_i (its reserved slots run out);
        # while no sequence needs two, need(K) = #{i : K_i <= K}, so the answer is the (free+1)-th smallest
        # K_i minus one. Check it (a sequence may need two) and bisect below it if it does not fit.
        bs = bm.block_size
        free = bm.num_free
        firsts = [(c.seq.num_blocks * bs - c.start - c.num_tokens) // per_step + 2 for c in chunks]
        hi = min(k, min(heapq.nsmallest(free + 1, firsts)[-1] - 1, k) if len(firsts) > free else k)
        lo = 1

        def fits(steps: int) -> bool:
            add = (steps - 1) * per_step
            return sum(max(0, -(-(c.start + c.num_tokens + add) // bs) - c.seq.num_blocks) for c in chunks) <= free

        if hi > 1 and not fits(hi):
            hi_bad = hi
            while hi_bad - lo > 1:
                mid = (lo + hi_bad) // 2
                if fits(mid):
                    lo = mid
                else:
                    hi_bad = mid
            hi = lo
        if hi > 1:
            bm.reserve_chunks(chunks, (hi - 1) * per_step)
        return max(hi, 1)
