"""The seam between the engine's scheduler and every backend (the seeds' hardware-abstraction layer).

One scheduler, many backends: the scheduler decides *which* tokens of *which* sequences run in a step and
which KV blocks they use; a backend executes that step and reports how long it took and what it cost.

* A real backend (``backends.torch``) runs the model and returns sampled tokens and its measured wall time.
* The simulated backend (``sim.backend``) runs nothing; it returns token counts and the time and energy the
  cost model predicts for the chip, and the engine advances a virtual clock by that time.

What differs between them is declared, never probed: :attr:`Backend.capabilities` (virtual time, length-only
sequences), :attr:`Backend.max_multi_step`, and the two numbers a simulated client reads
(:attr:`Backend.request_latency_s`, :attr:`Backend.idle_power_w`). The batch types live in ``batch.py``.
Nothing in the scheduler may know which kind of backend it drives.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Sequence as Seq

from jalapeno.engine.batch import ScheduledBatch, StepResult

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

    @abstractmethod
    def advance_steps(self, durations: Seq[float]) -> tuple[float, float, list[float] | None]:
        """Account for consecutive steps of ``durations`` (s): (end of the first, end of the last, every step
        end with the start first — or None when the clock knows only that they ended now)."""


class VirtualClock(Clock):
    def __init__(self, start: float = 0.0) -> None:
        self._t = start

    def now(self) -> float:
        return self._t

    def advance(self, dt: float) -> None:
        self._t += dt

    def wait_until(self, t: float) -> None:
        self._t = max(self._t, t)

    def advance_steps(self, durations: Seq[float]) -> tuple[float, float, list[float] | None]:
        if len(durations) == 1:
            self._t += durations[0]
            return self._t, self._t, None
        ends = list(accumulate(durations, initial=self._t))  # step ends summed one by one, as advance() would
        self._t = max(self._t, ends[-1])
        return ends[1], ends[-1], ends


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

    def advance_steps(self, durations: Seq[float]) -> tuple[float, float, list[float] | None]:
        now = self.now()  # the steps already took their time: every token came back now
        return now, now, None


@dataclass(frozen=True)
class Capabilities:
    """What a backend declares about itself; the engine (and a server) read these, never the backend's type."""

    #: steps are priced, not run: ``execute`` returns predicted durations at once, so the engine runs on a
    #: :class:`VirtualClock` (a server paces released tokens to it)
    virtual_time: bool = False
    #: sequences are lengths only (no token ids; ``StepResult.token_counts`` instead of tokens): the block
    #: manager only counts blocks, and decodes may advance together in a lockstep group
    length_only: bool = False


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
    capabilities: Capabilities = Capabilities()

    @abstractmethod
    def num_kv_blocks(self, block_size: int) -> int:
        """How many KV blocks of ``block_size`` tokens fit in the memory left after weights/activations."""

    @abstractmethod
    def execute(self, batch: ScheduledBatch) -> StepResult:
        """Run one step (or ``batch.num_steps`` decode steps) and report tokens, time and energy."""

    def num_offload_blocks(self, block_size: int) -> int:
        """KV blocks a lower tier (host DRAM, SSD) can hold for preempted sequences; the block manager then
        offloads a victim's blocks there instead of dropping them, and ``execute`` prices bringing them back
        (:attr:`ScheduledBatch.loaded_tokens`). 0 (the default): no offload tier, preemption recomputes."""
        return 0

    def free_sequence(self, seq: "Sequence") -> None:  # noqa: B027 - optional hook
        """Called when a sequence finishes or is preempted (e.g. to drop per-sequence backend state)."""

    def spec_decode_stats(self) -> dict | None:
        """Speculative-decoding counters (:meth:`jalapeno.speculative.SpeculativeStats.to_dict`) when the backend speculates,
        else None."""
        return None

    @property
    def request_latency_s(self) -> float:
        """Serving-stack latency (s) a request spends before the engine sees it, when the backend models it
        (simulated backends; a real one's is measured, so 0)."""
        return 0.0

    @property
    def idle_power_w(self) -> float:
        """Power (W) the backend's chips draw while no step runs, when it models it (simulated backends)."""
        return 0.0
