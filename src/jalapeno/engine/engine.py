"""The engine loop: schedule → backend.execute → apply results, on a clock.

``Engine(backend, config)`` serves every backend through the one scheduler. It runs on a
:class:`~jalapeno.engine.interface.VirtualClock` when the backend is simulated (time jumps by the predicted
step times) and on a :class:`~jalapeno.engine.interface.WallClock` otherwise.

Thread safety: ``add_request``, ``abort`` and ``step`` take one lock, so a server may call the first two from
its event loop while another thread runs ``step`` in a loop.

Inter-token latencies are pooled engine-wide as weighted samples (value, count): a multi-step decode of K
steps over B sequences adds K values of weight B, never K·B numbers.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from itertools import accumulate
from operator import sub

import numpy as np

from jalapeno.engine.block_manager import BlockManager
from jalapeno.engine.config import EngineConfig
from jalapeno.engine.interface import Backend, Clock, ScheduledBatch, StepResult, VirtualClock, WallClock
from jalapeno.engine.scheduler import Scheduler
from jalapeno.engine.sequence import RequestOutput, SamplingParams, Sequence, SeqStatus
from jalapeno.errors import CapacityError, RequestError


@dataclass(frozen=True)
class EngineStats:
    """A snapshot for the server's /metrics and for logs."""

    running: int
    waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    tokens_generated: int
    prompt_tokens_computed: int
    num_steps: int
    num_preemptions: int
    energy_j: float
    now_s: float

    @property
    def kv_usage(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total if self.kv_blocks_total else 0.0


class Engine:
    """Continuous-batching engine over one backend (one model replica)."""

    def __init__(self, backend: Backend, config: EngineConfig | None = None, clock: Clock | None = None) -> None:
        self.backend = backend
        self.config = config = config or EngineConfig()
        num_blocks = config.num_kv_blocks or backend.num_kv_blocks(config.block_size)
        if num_blocks < 1:
            raise CapacityError("no memory is left for the KV cache after the weights: use more chips or a smaller dtype")
        self.block_manager = BlockManager(
            num_blocks,
            config.block_size,
            enable_prefix_caching=config.enable_prefix_caching,
            track_ids=not backend.is_simulated,
        )
        # no sequence may outgrow the KV cache (else, alone and preempted, it could never be readmitted):
        # like vLLM, cap max_model_len at the cache's capacity (less the speculative look-ahead)
        cap = num_blocks * config.block_size - config.num_speculative_tokens
        if config.max_model_len is None or config.max_model_len > cap:
            self.config = config = dataclasses.replace(config, max_model_len=cap)
        self.scheduler = Scheduler(config, self.block_manager, on_free=backend.free_sequence)
        self.clock: Clock = clock or (VirtualClock() if backend.is_simulated else WallClock())
        self._virtual = isinstance(self.clock, VirtualClock)
        self._max_steps = max(1, int(backend.max_multi_step))
        self._lock = threading.RLock()
        self._seqs: dict[int | str, Sequence] = {}
        #: time of the next event outside the engine (e.g. an arrival); multi-step decodes stop there
        self.next_event_s: float | None = None
        self.energy_j = 0.0
        #: duration of the last step when it was all-decode and nothing finished (else 0): a lower bound on
        #: the next steps' durations while the batch only grows (used to interleave engines in a cluster)
        self.last_decode_step_s = 0.0
        self.num_steps = 0
        self.tokens_generated = 0
        self.prompt_tokens_computed = 0
        # pooled inter-token gaps (s): scalars with a count, and arrays with one count each
        self._itl_v: list[float] = []
        self._itl_c: list[int] = []
        self._itl_arrays: list[tuple[list[float], int]] = []  # (gaps of a multi-step batch, sequences)

    # --- requests ---------------------------------------------------------------------------------
    def add_request(
        self,
        prompt_token_ids: list[int] | None = None,
        sampling: SamplingParams | None = None,
        *,
        prompt_len: int | None = None,
        request_id: int | str | None = None,
        arrival_s: float | None = None,
        user_data: object = None,
    ) -> Sequence:
        """Queue a request (token ids for real backends, or only ``prompt_len`` for simulation)."""
        seq = Sequence(
            prompt_token_ids,
            sampling,
            prompt_len=prompt_len,
            seq_id=request_id,
            arrival_s=self.clock.now() if arrival_s is None else arrival_s,
            user_data=user_data,
        )
        self.add_sequence(seq)
        return seq

    def add_sequence(self, seq: Sequence) -> None:
        """Queue a prepared sequence (e.g. one whose KV arrives from a prefill worker: counters preset)."""
        cfg = self.config
        bm = self.block_manager
        if bm.blocks_for(seq.num_tokens + 1 + cfg.num_speculative_tokens) > bm.num_blocks:
            raise CapacityError(
                f"request of {seq.num_tokens} tokens needs more KV blocks than the cache holds "
                f"({bm.num_blocks} × {bm.block_size} tokens)"
            )
        if cfg.max_model_len is not None and seq.num_tokens >= cfg.max_model_len:
            raise RequestError(
                f"prompt of {seq.num_tokens} tokens does not fit max_model_len={cfg.max_model_len}: shorten it"
            )
        with self._lock:
            if seq.seq_id in self._seqs:
                raise RequestError(f"request id {seq.seq_id!r} is already in the engine")
            self._seqs[seq.seq_id] = seq
            self.scheduler.add(seq)

    def abort(self, request_id: int | str) -> bool:
        """Stop a request now and free its KV blocks. False if it is unknown or already finished."""
        with self._lock:
            seq = self.scheduler.abort(request_id)
            if seq is None:
                return False
            seq.finish_s = self.clock.now()
            self._seqs.pop(request_id, None)
            return True

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def get_sequence(self, request_id: int | str) -> Sequence | None:
        return self._seqs.get(request_id)

    @property
    def stats(self) -> EngineStats:
        bm = self.block_manager
        return EngineStats(
            running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting),
            kv_blocks_used=bm.num_used,
            kv_blocks_total=bm.num_blocks,
            tokens_generated=self.tokens_generated,
            prompt_tokens_computed=self.prompt_tokens_computed,
            num_steps=self.num_steps,
            num_preemptions=self.scheduler.num_preemptions,
            energy_j=self.energy_j,
            now_s=self.clock.now(),
        )

    # --- stepping ---------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one scheduling step (possibly a multi-step decode) and report what each request got."""
        outputs: list[RequestOutput] = []
        self._step(outputs)
        return outputs

    def step_finished(self) -> list[Sequence]:
        """Like :meth:`step` but returns only the sequences that finished (the simulator's fast path)."""
        return self._step(None)

    def _step(self, outputs: list[RequestOutput] | None) -> list[Sequence]:
        with self._lock:
            clock = self.clock
            group = self.scheduler.group
            if group is not None and group.members and (outputs is not None or group.t_last != clock.now()):
                group.dissolve()  # per-request outputs, or an idle gap: every sequence goes through the walk
            batch = self.scheduler.schedule(self._max_steps)
            if batch is None:
                return []
            t0 = clock.now()
            if batch.num_steps > 1:
                batch.start_s = t0
                batch.stop_at_s = self.next_event_s
            result = self.backend.execute(batch)
            return self._apply(batch, result, t0, outputs)

    def _apply(
        self, batch: ScheduledBatch, result: StepResult, t0: float, outputs: list[RequestOutput] | None
    ) -> list[Sequence]:
        clock = self.clock
        durations = result.step_durations or (result.duration_s,)
        n_steps = len(durations)
        if not self._virtual:
            clock.advance(result.duration_s)
            t_first = t_last = clock.now()
        elif n_steps == 1:
            clock.advance(durations[0])
            t_first = t_last = clock.now()
        else:  # step ends summed one by one, exactly as clock.advance would
            times = list(accumulate(durations, initial=t0))
            t_first, t_last = times[1], times[-1]
            clock.wait_until(t_last)
            # gaps of steps 2..n: one per sequence of the batch (all of them sample every step)
            self._itl_arrays.append((list(map(sub, times[2:], times[1:-1])), len(batch.chunks)))
        self.num_steps += n_steps
        self.energy_j += result.energy_j
        chunks = batch.chunks
        counts = result.token_counts
        if counts is None:
            counts = [len(t) for t in result.tokens]
        tokens = result.tokens if result.tokens else None
        nd = batch.num_decodes
        bm = self.block_manager
        prefix = bm.prefix_caching
        max_len = self.config.max_model_len
        trim = self.config.num_speculative_tokens > 0 or n_steps < batch.num_steps
        generated = prefilled = 0
        common = 0  # sequences whose previous token came at t0 (their first gap is t_first - t0)
        finished: list[Sequence] = []
        itl_v, itl_c = self._itl_v, self._itl_c
        sched = self.scheduler
        group = sched.group
        first = sched.num_grouped
        if first:
            # the lockstep group (the batch's head): each member gained one token per step and sampled at t0
            assert group is not None and not self.config.num_speculative_tokens
            generated += first * n_steps
            common += first
            for seq in group.advance(n_steps, t_last):
                seq.finish_s = t_last
                sched.finish(seq, "length")
                self._seqs.pop(seq.seq_id, None)
                finished.append(seq)
            if trim:
                bm.give(group.trim())
        fast = nd and tokens is None and outputs is None and not prefix
        bs = bm.block_size
        if fast:
            # simulation fast path over the other decode chunks: counters only
            for c, new in zip(chunks[first:nd], counts[first:nd]):
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
                    itl_v.append(t_first - last)
                    itl_c.append(1)
                seq.last_token_s = t_last
                if out == mt or plen + out >= max_len:
                    seq.finish_s = t_last
                    sched.finish(seq, "length")
                    self._seqs.pop(seq.seq_id, None)
                    finished.append(seq)
                    continue
                if trim and seq.num_blocks * bs >= comp + bs:  # holds a block beyond its computed tokens
                    bm.trim(seq, comp)
            first = nd
        for i in range(first, len(chunks)):
            c = chunks[i]
            seq = c.seq
            out = seq.num_output_tokens
            if (i >= nd) if nd is not None else (not out or c.start < seq.prompt_len + out - 1):
                prefilled += c.num_tokens
            new = counts[i]
            if not new:  # a prefill chunk that does not end the prompt
                seq.num_computed_tokens = c.start + c.num_tokens
                if prefix:
                    bm.register_full_blocks(seq)
                continue
            left = seq.max_tokens - out
            if new > left:
                new = left
            reason = None
            new_ids: list[int] = []
            if tokens is not None and seq.output_token_ids is not None:
                new_ids = list(tokens[i][:new])
                sp = seq.sampling
                if sp.stop_token_ids and not sp.ignore_eos:
                    for j, tok in enumerate(new_ids):
                        if tok in sp.stop_token_ids:
                            new_ids = new_ids[: j + 1]
                            new = j + 1
                            reason = "stop"
                            break
                seq.output_token_ids.extend(new_ids)
            seq.num_output_tokens = out = out + new
            seq.num_computed_tokens = seq.prompt_len + out - 1  # all but the newest token are in the cache
            if prefix:
                bm.register_full_blocks(seq)
            generated += new
            last = seq.last_token_s
            if last == t0:
                common += 1
            elif last is None:
                seq.first_token_s = t_first
            else:
                itl_v.append(t_first - last)
                itl_c.append(1)
            seq.last_token_s = t_last
            if reason is None and (out >= seq.max_tokens or (max_len is not None and seq.prompt_len + out >= max_len)):
                reason = "length"
            if reason is not None:
                seq.finish_s = t_last
                self.scheduler.finish(seq, reason)
                self._seqs.pop(seq.seq_id, None)
                finished.append(seq)
            elif trim:
                # drop blocks reserved for rejected draft tokens or for steps cut off at an arrival
                bm.trim(seq, seq.num_computed_tokens)
            if outputs is not None:
                outputs.append(
                    RequestOutput(
                        seq.seq_id,
                        new_ids,
                        new,
                        reason is not None,
                        seq.finish_reason if reason is not None else None,
                        out,
                        seq.prompt_len,
                    )
                )
        self.tokens_generated += generated
        self.prompt_tokens_computed += prefilled
        if common:
            itl_v.append(t_first - t0)
            itl_c.append(common)
        running = sched.running
        for seq in finished:
            running.remove(seq)
        if fast and group is not None:
            # the decodes behind the group join it, in running order, once they hold exactly the blocks of
            # their computed tokens (a prompt that just finished may hold one more: it joins a step later)
            for c in chunks[sched.num_grouped : nd]:
                seq = c.seq
                if seq.status is SeqStatus.FINISHED:
                    continue
                n = len(group)
                if running[n] is not seq or seq.num_blocks != -(-seq.num_computed_tokens // bs):
                    break
                group.join(seq, min(seq.max_tokens, max_len - seq.prompt_len))
        last_is_decode = n_steps > 1 or prefilled == 0
        self.last_decode_step_s = durations[-1] if last_is_decode and not finished else 0.0
        return finished

    # --- results ----------------------------------------------------------------------------------
    def itl_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Pooled inter-token gaps (s) and their counts, over the engine's life."""
        vals = [np.asarray(self._itl_v, dtype=np.float64)]
        cnts = [np.asarray(self._itl_c, dtype=np.int64)]
        for gaps, w in self._itl_arrays:
            vals.append(np.asarray(gaps, dtype=np.float64))
            cnts.append(np.full(len(gaps), w, dtype=np.int64))
        return np.concatenate(vals), np.concatenate(cnts)
