"""The engine loop: schedule → backend.execute → ``Scheduler.update_from_output``, on a clock.

``Engine(backend, config)`` serves every backend through the one scheduler. It runs on a
:class:`~jalapeno.engine.interface.VirtualClock` when the backend declares ``capabilities.virtual_time`` (time
jumps by the predicted step times) and on a :class:`~jalapeno.engine.interface.WallClock` otherwise.

Thread safety: ``add_request``, ``abort`` and ``step`` take one lock, so a server may call the first two from
its event loop while another thread runs ``step`` in a loop.

Inter-token latencies are pooled engine-wide as weighted samples (value, count): a multi-step decode of K
steps over B sequences adds K values of weight B, never K·B numbers.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

import numpy as np

from jalapeno._mypyc import mypyc_attr  # a compile-time hint (jalapeno build-native); plain Python: a no-op
from jalapeno.engine.block_manager import BlockManager
from jalapeno.engine.config import EngineConfig
from jalapeno.engine.interface import Backend, Clock, VirtualClock, WallClock
from jalapeno.engine.scheduler import Scheduler
from jalapeno.engine.sequence import RequestOutput, SamplingParams, Sequence
from jalapeno.engine.timing import LatencyRecorder, StepTiming
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


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled: tests instrument it by subclassing
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
            track_ids=not backend.capabilities.length_only,
            offload_blocks=backend.num_offload_blocks(config.block_size),
        )
        # no sequence may outgrow the KV cache (else, alone and preempted, it could never be readmitted):
        # like vLLM, cap max_model_len at the cache's capacity (less the speculative look-ahead)
        cap = num_blocks * config.block_size - config.num_speculative_tokens
        if config.max_model_len is None or config.max_model_len > cap:
            self.config = config = dataclasses.replace(config, max_model_len=cap)
        #: the longest sequence (tokens) add_sequence accepts: both checks below as one comparison
        self._max_add = min(num_blocks * config.block_size - 1 - config.num_speculative_tokens,
                            config.max_model_len - 1)  # type: ignore[operator]
        self.scheduler = Scheduler(config, self.block_manager, on_free=backend.free_sequence)
        self.clock: Clock = clock or (VirtualClock() if backend.capabilities.virtual_time else WallClock())
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
        #: pooled inter-token gaps (s)
        self.latency = LatencyRecorder()

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
        kv_key: object = None,
    ) -> Sequence:
        """Queue a request (token ids for real backends, or only ``prompt_len`` for simulation). ``kv_key``:
        the request's prompt extends that of the last finished request with the same key, whose KV the offload
        tier may still hold (prefix reuse across requests; length-only sequences have no ids to hash)."""
        seq = Sequence(
            prompt_token_ids,
            sampling,
            prompt_len=prompt_len,
            seq_id=request_id,
            arrival_s=self.clock.now() if arrival_s is None else arrival_s,
            user_data=user_data,
        )
        seq.kv_key = kv_key
        self.add_sequence(seq)
        return seq

    def add_sequence(self, seq: Sequence) -> None:
        """Queue a prepared sequence (e.g. one whose KV arrives from a prefill worker: counters preset)."""
        if seq.prompt_len + seq.num_output_tokens > self._max_add:
            self._reject(seq)
        with self._lock:
            if seq.seq_id in self._seqs:
                raise RequestError(f"request id {seq.seq_id!r} is already in the engine")
            self._seqs[seq.seq_id] = seq
            self.scheduler.add(seq)

    def _reject(self, seq: Sequence) -> None:
        """Raise why ``seq`` cannot be queued: it outgrows the KV cache or ``max_model_len``."""
        cfg = self.config
        bm = self.block_manager
        if bm.blocks_for(seq.num_tokens + 1 + cfg.num_speculative_tokens) > bm.num_blocks:
            raise CapacityError(
                f"request of {seq.num_tokens} tokens needs more KV blocks than the cache holds "
                f"({bm.num_blocks} × {bm.block_size} tokens); give the KV cache more memory (more chips, a larger "
                "memory fraction: --memory-fraction) or shorten the request"
            )
        if cfg.max_model_len is not None and seq.num_tokens >= cfg.max_model_len:
            raise RequestError(
                f"prompt of {seq.num_tokens} tokens does not fit max_model_len={cfg.max_model_len}: shorten it"
            )
        raise AssertionError("unreachable: _max_add disagrees with the checks")  # pragma: no cover

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
        """One event as one routine: schedule → backend → clock → ``update_from_output`` (the same calls the
        per-request path makes, with no intermediate routine or object per stage)."""
        with self._lock:
            clock = self.clock
            sched = self.scheduler
            group = sched.group
            if group is not None and group.members and (outputs is not None or group.t_last != clock.now()):
                group.dissolve()  # per-request outputs, or an idle gap: every sequence goes through the walk
            batch = sched.schedule(self._max_steps)
            if batch is None:
                return []
            t0 = clock.now()
            if batch.num_steps > 1:
                batch.start_s = t0
                batch.stop_at_s = self.next_event_s
            result = self.backend.execute(batch)
            # the clock moves over the step(s) the result reports; a multi-step batch's gaps go to the recorder
            durations = result.step_durations or (result.duration_s,)
            t_first, t_last, step_ends = clock.advance_steps(durations)
            if step_ends is not None:
                self.latency.add_steps(step_ends, len(batch.chunks))
            n = len(durations)
            timing = StepTiming.of(t0, t_first, t_last, n)
            self.num_steps += n
            self.energy_j += result.energy_j
            update = sched.update_from_output(batch, result, timing, self.latency, outputs)
            self.tokens_generated += update.generated
            self.prompt_tokens_computed += update.prefilled
            finished = update.finished
            if finished:
                seqs = self._seqs
                for seq in finished:
                    seqs.pop(seq.seq_id, None)
                self.last_decode_step_s = 0.0
            else:  # all-decode and nothing finished: a lower bound on the next steps' durations
                self.last_decode_step_s = durations[-1] if n > 1 or update.prefilled == 0 else 0.0
            return finished

    # --- results ----------------------------------------------------------------------------------
    def itl_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Pooled inter-token gaps (s) and their counts, over the engine's life."""
        return self.latency.samples()

    def take_itl_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`itl_samples`, then forget them: a long-running server drains them every step into streaming
        statistics, so memory does not grow with every token served."""
        with self._lock:
            return self.latency.take()
