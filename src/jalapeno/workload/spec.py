"""The :class:`Workload` an engine run drives."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jalapeno.errors import ConfigError
from jalapeno.workload.lengths import RangeMode, arrival_times, sample_lengths


@dataclass
class Workload:
    """Requests and how they arrive.

    ``input_lens`` / ``output_lens`` hold one entry per *call*: with ``chain_calls = N`` (agentic chains) the
    calls of chain ``j`` are entries ``j·N … j·N+N−1``; call ``i+1`` is sent when call ``i`` finishes, with
    prompt = previous prompt + previous output + ``input_lens`` of call ``i+1`` (its new tokens).

    Arrivals: closed loop when ``concurrency`` is set (``concurrency`` chains in flight; a finished one is
    replaced at once), else open loop at ``arrival_s`` (one time per chain, seconds, non-decreasing), with at
    most ``max_concurrency`` in flight when given (later ones wait client-side; their clock starts when sent).
    """

    input_lens: np.ndarray
    output_lens: np.ndarray
    concurrency: int | None = None
    arrival_s: np.ndarray | None = None
    max_concurrency: int | None = None
    chain_calls: int = 1
    ignore_eos: bool = True
    #: extra seconds between a call leaving the client and reaching the engine (network, client-side queueing),
    #: on top of the serving stack's own per-request latency that a simulated backend models; in TTFT and E2E
    request_latency_s: float = 0.0

    def __post_init__(self) -> None:
        self.input_lens = np.asarray(self.input_lens, dtype=np.int64)
        self.output_lens = np.asarray(self.output_lens, dtype=np.int64)
        if self.input_lens.shape != self.output_lens.shape or self.input_lens.ndim != 1:
            raise ConfigError("workload input and output lengths must be 1-D arrays of the same length")
        if self.input_lens.size == 0:
            raise ConfigError("workload has no requests")
        if not self.request_latency_s >= 0:
            raise ConfigError(f"request latency {self.request_latency_s} s must be >= 0")
        if np.any(self.input_lens <= 0) or np.any(self.output_lens <= 0):
            raise ConfigError("workload lengths must be > 0 tokens")
        if self.chain_calls < 1 or self.input_lens.size % self.chain_calls:
            raise ConfigError(
                f"--chain-calls {self.chain_calls} must be >= 1 and divide the number of calls ({self.input_lens.size})"
            )
        if (self.concurrency is None) == (self.arrival_s is None):
            raise ConfigError("a workload needs exactly one of: concurrency (closed loop) or arrival times (open loop)")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"--concurrency must be >= 1 (got {self.concurrency})")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ConfigError(f"--max-concurrency must be >= 1 (got {self.max_concurrency})")
        if self.arrival_s is not None:
            self.arrival_s = np.asarray(self.arrival_s, dtype=np.float64)
            if self.arrival_s.shape != (self.num_chains,):
                raise ConfigError(f"need one arrival time per request ({self.num_chains}), got {self.arrival_s.size}")
            if np.any(np.diff(self.arrival_s) < 0) or np.any(self.arrival_s < 0):
                raise ConfigError("arrival times must be >= 0 and non-decreasing")

    @property
    def num_chains(self) -> int:
        """Independent requests (chains of ``chain_calls`` calls; plain requests when ``chain_calls == 1``)."""
        return self.input_lens.size // self.chain_calls

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None


def inferencex_workload(
    isl: int,
    osl: int,
    *,
    concurrency: int | None = None,
    num_prompts: int | None = None,
    range_ratio: float = 0.8,
    range_mode: RangeMode = "ix",
    request_rate: float | None = None,
    arrival: str = "poisson",
    max_concurrency: int | None = None,
    chain_calls: int = 1,
    seed: int = 0,
) -> Workload:
    """InferenceX's workload: random lengths in [r·ISL, ISL] / [r·OSL, OSL], EOS ignored, ``num_prompts``
    (default 10 × concurrency) requests, closed loop at ``concurrency`` unless ``request_rate`` is given
    (open loop, Poisson or constant arrivals, capped by ``max_concurrency`` or else by ``concurrency``)."""
    if concurrency is None and request_rate is None:
        raise ConfigError("give --concurrency (closed loop) or --request-rate (open loop)")
    if num_prompts is None:
        if concurrency is None and max_concurrency is None:
            raise ConfigError("--num-prompts is needed with --request-rate when no concurrency is given")
        num_prompts = 10 * (concurrency or max_concurrency or 1)
    n_calls = num_prompts * chain_calls
    i, o = sample_lengths(n_calls, isl, osl, range_ratio, mode=range_mode, seed=seed)
    if request_rate is not None:
        t = arrival_times(num_prompts, request_rate, distribution=arrival, seed=seed + 1)  # type: ignore[arg-type]
        return Workload(i, o, arrival_s=t, max_concurrency=max_concurrency or concurrency, chain_calls=chain_calls)
    return Workload(i, o, concurrency=concurrency, chain_calls=chain_calls)
