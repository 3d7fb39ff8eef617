"""The seam between the engine's scheduler and every backend (the seeds' hardware-abstraction layer).

One scheduler, many backends: the scheduler decides *which* tokens of *which* sequences run in a step and
which KV blocks they use; a backend executes that step and reports how long it took and what it cost.

* A real backend (``backends.torch``) runs the model and returns sampled tokens and its measured wall time.
* The simulated backend (``backends.sim``) runs nothing; it returns placeholder tokens and the time and
  energy the cost model predicts for the chip, and the engine advances a virtual clock by that time.

Nothing in the scheduler may know which kind of backend it drives.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence as Seq

if TYPE_CHECKING:  # pragma: no cover
    from jalapeno.engine.sequence import Sequence


# ---------------------------------------------------------------------------------------------------------
# Clocks
# ---------------------------------------------------------------------------------------------------------
class Clock(ABC):
    """Time source for the engine. All times are seconds."""

    @abstractmethod
    def now(self) -> float: ...

    @abstractmethod
    def advance(self, dt: float) -> None:
        """Account for a step that took ``dt`` seconds (virtual clocks move; wall clocks already did)."""

    @abstractmethod
    def wait_until(self, t: float) -> None:
        """Idle until time ``t`` (virtual clocks jump; wall clocks sleep)."""


class VirtualClock(Clock):
    def __init__(self, start: float = 0.0) -> None:
        self._t = start

    def now(self) -> float:
        return self._t

    def advance(self, dt: float) -> None:
        self._t += dt

    def wait_until(self, t: float) -> None:
        self._t = max(self._t, t)


class WallClock(Clock):
    def __init__(self) -> None:
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def advance(self, dt: float) -> None:  # the step already took its time
        pass

    def wait_until(self, t: float) -> None:
        d = t - self.now()
        if d > 0:
            time.sleep(d)


# ---------------------------------------------------------------------------------------------------------
# What the scheduler hands a backend, and what comes back
# ---------------------------------------------------------------------------------------------------------
@dataclass
class SeqChunk:
    """One sequence's share of a step.

    ``start`` is the position of the first token fed this step (== tokens already in the KV cache), and
    ``num_tokens`` how many are fed: a prefill chunk, or 1 for decode (1 + k with speculative decoding).
    ``sample`` is True when the step must return a new token for the sequence (decode, or the last chunk
    of its prefill).
    """

    seq: "Sequence"
    start: int
    num_tokens: int
    sample: bool

    @property
    def is_prefill(self) -> bool:
        return self.start < self.seq.prompt_len

    @property
    def context_len(self) -> int:
        """Tokens in the KV cache after this step."""
        return self.start + self.num_tokens


@dataclass
class ScheduledBatch:
    chunks: list[SeqChunk]
    #: K > 1 asks the backend for K steps at once: this step as scheduled, then K-1 decode steps of every
    #: chunk's sequence (only when every chunk samples — decodes, and prompts whose last chunk this is —
    #: and the scheduler proved that nothing can change the batch for K steps). Real backends may refuse
    #: (see :attr:`Backend.max_multi_step`).
    num_steps: int = 1
    #: multi-step only (simulated backends): stop after the first step that ends at or after ``stop_at_s``,
    #: where step ends are ``start_s + d1``, ``+ d2``, ... summed one by one in float64 on the engine's clock
    #: (the next external arrival). ``None``: run all ``num_steps``. Report the steps run in ``step_durations``.
    stop_at_s: float | None = None
    start_s: float = 0.0
    #: when set, ``chunks[:num_decodes]`` are the decode chunks (each feeds a sequence's newest token on)
    #: and the rest are prefill chunks (the scheduler orders them so); None: not stated
    num_decodes: int | None = None
    #: when set, the sum of the decode chunks' ``start`` (the scheduler may know it without summing)
    decode_start_sum: int | None = None

    @property
    def num_prefill_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks if c.is_prefill)

    @property
    def num_decode_seqs(self) -> int:
        return sum(1 for c in self.chunks if not c.is_prefill)


@dataclass
class StepResult:
    """Outcome of one (or ``num_steps``) step(s).

    ``tokens[i]`` holds the tokens produced for ``batch.chunks[i]`` (empty when the chunk did not sample);
    with speculative decoding or multi-step decode a chunk can produce several. ``step_durations`` lists the
    duration of each of the ``num_steps`` steps (seconds); ``duration_s`` is their sum.
    """

    tokens: list[list[int]]
    duration_s: float
    energy_j: float = 0.0
    step_durations: Seq[float] = field(default_factory=tuple)
    #: tokens accepted per chunk per step when speculative decoding is on (simulation may use expectations)
    extra: dict = field(default_factory=dict)
    #: energy of each step run (J), parallel to ``step_durations`` (optional)
    step_energies: Seq[float] = field(default_factory=tuple)
    #: simulated backends: how many (placeholder) tokens each chunk produced over all steps run, instead of
    #: materialising them in ``tokens`` (which may then be empty)
    token_counts: Seq[int] | None = None


class SequenceFailed(Exception):
    """A backend's step failed because of one sequence (``seq_id``). Raised before the step changed anything
    the engine owns, so a caller may abort that sequence alone and step again for the others."""

    def __init__(self, seq_id: int | str, message: str) -> None:
        super().__init__(message)
        self.seq_id = seq_id
        self.message = message


class Backend(ABC):
    """What every backend implements. Small on purpose. ``execute`` raises :class:`SequenceFailed` when it can
    tell that one sequence caused a failure (its others then retry on the next step)."""

    #: largest K a backend accepts in :attr:`ScheduledBatch.num_steps` (1 = step by step only)
    max_multi_step: int = 1

    @abstractmethod
    def num_kv_blocks(self, block_size: int) -> int:
        """How many KV blocks of ``block_size`` tokens fit in the memory left after weights/activations."""

    @abstractmethod
    def execute(self, batch: ScheduledBatch) -> StepResult:
        """Run one step (or ``batch.num_steps`` decode steps) and report tokens, time and energy."""

    def free_sequence(self, seq: "Sequence") -> None:  # noqa: B027 - optional hook
        """Called when a sequence finishes or is preempted (e.g. to drop per-sequence backend state)."""

    @property
    def is_simulated(self) -> bool:
        """True when ``execute`` does no real work; the engine then runs on a :class:`VirtualClock`."""
        return False
