"""Continuous batching with chunked prefill and preemption by recompute (vLLM v1 policy, nano-vllm size).

Each step, under a token budget (``max_num_batched_tokens``) and a sequence cap (``max_num_seqs``):

1. every running *decode* gets its ``1 + k`` tokens (k = speculative draft tokens), oldest first;
2. running sequences still prefilling get their next chunk, oldest first;
3. waiting sequences are admitted first-come-first-served with a prefill chunk of what budget is left
   (skipped in a step that had to preempt).

When a sequence cannot get the KV blocks it needs, the newest running sequence is preempted by recompute:
its blocks are freed and it goes back to the *front* of the waiting queue (it prefills prompt + output again).

Multi-step decode: when a step is all-decode and nothing can change the batch for K steps — no completion
(bounded with ``1 + k`` tokens per step), no admission (admission already failed this step and free blocks
only shrink while decoding), and blocks for all K steps reserved up front — the batch asks for K steps at
once. The engine still cuts them at the next external arrival (see ``engine.py``).
"""

from __future__ import annotations

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
        decode batch (the backend's :attr:`~jalapeno.engine.interface.Backend.max_multi_step`)."""
        cfg = self.config
        bm = self.bm
        running = self.running
        per_decode = 1 + cfg.num_speculative_tokens
        budget = cfg.max_num_batched_tokens
        chunks: list[SeqChunk] = []
        preempted = False

        for want_decode in (True, False):
            i = 0
            while i < len(running) and budget > 0:
                seq = running[i]
                i += 1
                start = seq.num_computed_tokens
                decoding = start >= seq.num_tokens - 1 and seq.num_output_tokens > 0
                if decoding is not want_decode:
                    continue
                n = per_decode if decoding else min(seq.num_tokens - start, budget)
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
                        i -= 1
                        break
                else:
                    chunks.append(SeqChunk(seq, start, n, decoding or start + n >= seq.num_tokens))
                    budget -= n

        if not preempted:
            waiting = self.waiting
            while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
                seq = waiting[0]
                if seq.num_blocks == 0 and seq.num_computed_tokens == 0:
                    bm.match_prefix(seq)
                start = seq.num_computed_tokens
                left = seq.num_tokens - start
                n = min(left, budget)
                if (n < left and not cfg.enable_chunked_prefill) or not bm.reserve(seq, start + n):
                    break
                waiting.popleft()
                seq.status = SeqStatus.RUNNING
                running.append(seq)
                chunks.append(SeqChunk(seq, start, n, start + n >= seq.num_tokens))
                budget -= n

        if not chunks:
            return None
        steps = 1
        if max_steps > 1 and not preempted and all(c.num_tokens == per_decode and c.seq.num_output_tokens for c in chunks):
            if all(c.start >= c.seq.num_tokens - 1 for c in chunks):
                steps = self._multi_step(chunks, max_steps, per_decode)
        return ScheduledBatch(chunks, num_steps=steps)

    def _multi_step(self, chunks: list[SeqChunk], max_steps: int, per_step: int) -> int:
        """Largest K <= max_steps for which no sequence can finish before step K and blocks for all K steps
        fit; reserves those blocks. Step 1's blocks are already held."""
        k = max_steps
        max_len = self.config.max_model_len
        for c in chunks:
            seq = c.seq
            left = seq.sampling.max_tokens - seq.num_output_tokens
            if max_len is not None:
                left = min(left, max_len - seq.num_tokens)
            # finishing *at* step K is fine; before it is not: (K-1)·per_step < left
            k = min(k, (left - 1) // per_step + 1)
            if k <= 1:
                return 1
        bm = self.bm
        bs = bm.block_size

        def need(steps: int) -> int:
            add = steps * per_step
            return sum(max(0, -(-(c.start + add) // bs) - c.seq.num_blocks) for c in chunks)

        if need(k) > bm.num_free:
            lo, hi = 1, k  # need(lo) fits (already reserved), need(hi) does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if need(mid) <= bm.num_free:
                    lo = mid
                else:
                    hi = mid
            k = lo
        if k > 1:
            add = k * per_step
            for c in chunks:
                bm.reserve(c.seq, c.start + add)
        return k
