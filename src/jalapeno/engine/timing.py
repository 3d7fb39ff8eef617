"""When a step's tokens came (:class:`StepTiming`) and the engine's pooled inter-token latencies
(:class:`LatencyRecorder`).

Inter-token latencies are pooled engine-wide as weighted samples (value, count): a multi-step decode of K
steps over B sequences adds K values of weight B, never K·B numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import sub

import numpy as np


@dataclass(frozen=True)
class StepTiming:
    """Clock times of one applied batch: it started at ``t0``; its first step ended at ``t_first`` (every
    sequence's first new token), its last at ``t_last``; ``num_steps`` steps ran."""

    t0: float
    t_first: float
    t_last: float
    num_steps: int

    @classmethod
    def of(cls, t0: float, t_first: float, t_last: float, num_steps: int) -> "StepTiming":
        """``StepTiming(...)``, cheaper (one per engine step): the new frozen instance's dict written directly
        instead of ``object.__setattr__`` per field. The same object."""
        s = object.__new__(cls)
        d = s.__dict__
        d["t0"] = t0
        d["t_first"] = t_first
        d["t_last"] = t_last
        d["num_steps"] = num_steps
        return s


class LatencyRecorder:
    """Pooled inter-token gaps (s): scalar gaps with a count (``values`` / ``counts``, appended to directly on
    the hot path), and the gaps of multi-step batches with one count each."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.counts: list[int] = []
        self._steps: list[tuple[list[float], int]] = []  # (gaps of a multi-step batch, sequences)

    def add(self, gap_s: float, count: int = 1) -> None:
        self.values.append(gap_s)
        self.counts.append(count)

    def add_steps(self, step_ends: list[float], num_seqs: int) -> None:
        """A multi-step batch's step end times (``step_ends[0]`` = its start): the gaps of steps 2..n, each
        once per sequence of the batch (all of them sample every step)."""
        self._steps.append((list(map(sub, step_ends[2:], step_ends[1:-1])), num_seqs))

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`samples`, then forget them (the lists are cleared in place: the hot path holds them)."""
        out = self.samples()
        self.values.clear()
        self.counts.clear()
        self._steps.clear()
        return out

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap recorded (s) and its count."""
        vals = [np.asarray(self.values, dtype=np.float64)]
        cnts = [np.asarray(self.counts, dtype=np.int64)]
        for gaps, w in self._steps:
            vals.append(np.asarray(gaps, dtype=np.float64))
            cnts.append(np.full(len(gaps), w, dtype=np.int64))
        return np.concatenate(vals), np.concatenate(cnts)
