"""When a step's tokens came (:class:`StepTiming`) and the engine's pooled inter-token latencies
(:class:`LatencyRecorder`).

Inter-token latencies are pooled engine-wide as weighted samples (value, count): a multi-step decode of K
steps over B sequences adds K values of weight B, never K·B numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import sub
from typing import Final

import numpy as np


def _probe() -> None:
    pass


#: True when this module runs compiled (``jalapeno build-native``): :class:`StepTiming` is then a native class (no
#: ``__dict__``) whose plain constructor is the fast one; pure Python keeps the ``__dict__`` writes
NATIVE: Final = type(_probe).__name__ != "function"


@dataclass(frozen=True, init=False)
class StepTiming:
    """Clock times of one applied batch: it started at ``t0``; its first step ended at ``t_first`` (every
    sequence's first new token), its last at ``t_last``; ``num_steps`` steps ran."""

    t0: float
    t_first: float
    t_last: float
    num_steps: int

    def __init__(self, t0: float, t_first: float, t_last: float, num_steps: int) -> None:
        """The dataclass's constructor, written out (``init=False``): compiled, native field stores; pure Python,
        the new frozen instance's dict written directly."""
        if NATIVE:
            self.t0 = t0  # type: ignore[misc]
            self.t_first = t_first  # type: ignore[misc]
            self.t_last = t_last  # type: ignore[misc]
            self.num_steps = num_steps  # type: ignore[misc]
            return
        d = self.__dict__
        d["t0"] = t0
        d["t_first"] = t_first
        d["t_last"] = t_last
        d["num_steps"] = num_steps

    @classmethod
    def of(cls, t0: float, t_first: float, t_last: float, num_steps: int) -> "StepTiming":
        """``StepTiming(...)`` (one per engine step); the written-out constructor is the fast one, in both builds."""
        return StepTiming(t0, t_first, t_last, num_steps)


class LatencyRecorder:
    """Pooled inter-token gaps (s): scalar gaps with a count (``values`` / ``counts``, appended to directly on
    the hot path), and the gaps of multi-step batches with one count each."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.counts: list[int] = []
        # the gaps of multi-step batches, one flat list in the order they came, and per batch its number of
        # sequences (each gap's count) and of gaps: one ``extend`` per batch, one array of each at the end
        self._gaps: list[float] = []
        self._seqs: list[int] = []
        self._ngaps: list[int] = []

    def add(self, gap_s: float, count: int = 1) -> None:
        self.values.append(gap_s)
        self.counts.append(count)

    def add_steps(self, step_ends: list[float], num_seqs: int) -> None:
        """A multi-step batch's step end times (``step_ends[0]`` = its start): the gaps of steps 2..n, each
        once per sequence of the batch (all of them sample every step)."""
        self._gaps.extend(map(sub, step_ends[2:], step_ends[1:-1]))
        self._seqs.append(num_seqs)
        self._ngaps.append(len(step_ends) - 2)

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`samples`, then forget them (the lists are cleared in place: the hot path holds them)."""
        out = self.samples()
        self.values.clear()
        self.counts.clear()
        self._gaps.clear()
        self._seqs.clear()
        self._ngaps.clear()
        return out

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap recorded (s) and its count: the scalar gaps, then each multi-step batch's in order."""
        vals = np.concatenate((np.asarray(self.values, dtype=np.float64), np.asarray(self._gaps, dtype=np.float64)))
        steps: np.ndarray = np.repeat(np.asarray(self._seqs, dtype=np.int64), np.asarray(self._ngaps, dtype=np.int64))
        return vals, np.concatenate((np.asarray(self.counts, dtype=np.int64), steps))
