"""Statistical early stop (an explicit opt-in mode; the default run is InferenceX-exact: every prompt is sent).

A closed-loop run's latency statistics settle long before ``10 × concurrency`` requests have finished. With
``EarlyStop(tolerance)`` the simulated client watches the completions, in completion order, in batches of
``max(concurrency, min_batch)`` requests (one "round" of the closed loop). The first batch is the warm-up
(every client starts at once: its TTFTs carry the start-up queue) and is not used to judge convergence. For
each later batch it takes the median and p99 of TTFT and TPOT; with at least ``min_batches`` such batches, the
95 % confidence interval of each statistic's mean over batches (batch means: ``t₀.₉₇₅ · sd / √n``) is
compared with the statistic itself, and so is the drift between the means of the first and the second half
of those batches (a closed loop can take several rounds to leave its start-up waves: Llama-3.1-8B on B200 at
concurrency 128 has per-round median TPOTs of 6.9, 7.0, 8.8, 9.9, 10.5 ms before it settles near 10, and
batch means alone judged rounds 1-7 converged at ±14 % while their mean sat 13 % under the exact run's). When
every half-width is within ``tolerance`` of the statistic and every drift within half of it, the client sends no
new request: the requests in flight finish (so the run is exactly a run with fewer prompts) and the metrics are
those of every request that finished, warm-up included, as the exact run computes them.

The result's ``early_stop`` block says whether the run stopped early, how many requests ran out of how many
planned, and the confidence intervals (batch means, ms) at the stop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from jalapeno.errors import ConfigError

if TYPE_CHECKING:
    from jalapeno.sim.client import SimResult

#: the statistics judged: (name in the result, latency, quantile)
STATS = (("median_ttft_ms", "ttft", 50.0), ("p99_ttft_ms", "ttft", 99.0),
         ("median_tpot_ms", "tpot", 50.0), ("p99_tpot_ms", "tpot", 99.0))


@dataclass
class EarlyStop:
    """Stop sending requests once the median and p99 of TTFT and TPOT are known within ``tolerance``
    (relative half-width of a 95 % batch-means confidence interval)."""

    tolerance: float
    #: fewest completions in one batch (a p99 needs ~100)
    min_batch: int = 100
    #: fewest batches after the warm-up one before the run may stop
    min_batches: int = 3
    planned: int = 0
    stopped: bool = False
    _ttft: list[float] = field(default_factory=list, repr=False)
    _tpot: list[float] = field(default_factory=list, repr=False)
    _batch: int = 0
    _ci: dict[str, tuple[float, float]] = field(default_factory=dict, repr=False)
    _drift: dict[str, float] = field(default_factory=dict, repr=False)
    _t_warm: float = 0.0  # when the warm-up batch's last request finished
    _t_stop: float = 0.0  # when the request that decided the stop finished
    _n_stop: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.tolerance < 1.0:
            raise ConfigError(f"--early-stop {self.tolerance} must be a relative tolerance in (0, 1), e.g. 0.05")

    def start(self, concurrency: int, planned: int) -> None:
        self._batch = max(int(concurrency), self.min_batch)
        self.planned = planned

    def observe(self, ttft_s: float, e2el_s: float, output_tokens: int, finish_s: float) -> bool:
        """Record one finished request; True when the run has converged (then stop sending)."""
        if self.stopped:
            return False
        self._ttft.append(ttft_s)
        self._tpot.append((e2el_s - ttft_s) / (output_tokens - 1) if output_tokens > 1 else float("nan"))
        n = len(self._ttft)
        if n == self._batch:
            self._t_warm = finish_s
        if n % self._batch or n // self._batch < self.min_batches + 1:
            return False
        self.stopped = self._converged(n // self._batch)
        self._t_stop, self._n_stop = finish_s, n
        return self.stopped

    def extrapolate(self, result: "SimResult") -> "SimResult":
        """``result`` (a stopped, drained run) completed to the planned request count under the steady-state
        assumption (module docstring); ``result`` unchanged when the run did not stop early."""
        from dataclasses import replace

        done = result.outcomes
        missing = self.planned - len(done)
        if not self.stopped or missing <= 0:
            return result
        steady = done[self._batch : self._n_stop]
        per_request_s = (self._t_stop - self._t_warm) / len(steady)
        added_s = missing * per_request_s
        fill = [steady[i % len(steady)] for i in range(missing)]
        outcomes = done[: self._n_stop] + fill + done[self._n_stop :]
        power_w = result.energy_j / result.duration_s if result.duration_s > 0 else 0.0
        return replace(result, outcomes=outcomes, duration_s=result.duration_s + added_s,
                       energy_j=result.energy_j + power_w * added_s)

    def _converged(self, batches: int) -> bool:
        from scipy import stats

        b = self._batch
        lat = {"ttft": np.asarray(self._ttft[b : batches * b]).reshape(batches - 1, b),
               "tpot": np.asarray(self._tpot[b : batches * b]).reshape(batches - 1, b)}
        t = stats.t.ppf(0.975, batches - 2)
        ok = True
        for name, key, q in STATS:
            per_batch = np.nanpercentile(lat[key], q, axis=1) * 1e3
            mean = float(np.mean(per_batch))
            half = float(t * np.std(per_batch, ddof=1) / np.sqrt(batches - 1))
            self._ci[name] = (mean - half, mean + half)
            h = len(per_batch) // 2
            drift = abs(float(np.mean(per_batch[h:])) - float(np.mean(per_batch[:h])))
            self._drift[name] = drift / abs(mean) if mean else 0.0
            ok = ok and half <= self.tolerance * abs(mean) and drift <= 0.5 * self.tolerance * abs(mean)
        return ok

    def report(self, completed: int) -> dict:
        """The result's ``early_stop`` block (flat: one value per key): ``requests`` simulated of
        ``requests_planned``, the batch size, and each statistic's 95 % CI (batch means, ms) at the last check."""
        out: dict = {"tolerance": self.tolerance, "stopped_early": completed < self.planned,
                     "requests": completed, "requests_planned": self.planned, "batch": self._batch}
        for name, (lo, hi) in self._ci.items():
            out[f"{name}_ci95_lo"], out[f"{name}_ci95_hi"] = lo, hi
            out[f"{name}_drift"] = self._drift.get(name, 0.0)
        return out
