"""Drive a workload against an OpenAI-compatible endpoint and aggregate vLLM-defined metrics.

Load shapes (as vLLM ``bench serve``):
  * closed loop ``concurrency=C``: every request is released at t=0 and at most C are in flight, so a finished
    request is replaced at once (InferenceX runs ``--request-rate inf --max-concurrency C``);
  * open loop ``request_rate=λ``: arrivals from :func:`jalapeno.workload.arrival_times` (Poisson for
    burstiness 1), optionally capped by ``max_concurrency``; ``inf`` sends everything at once.
A request's clock starts when it is actually sent (after waiting for a concurrency slot), as in vLLM. The
benchmark ``duration`` runs from the first release to the last completion, warm-up requests excluded.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np

from jalapeno.bench.client import BenchRequest, EndpointConfig, send_request
from jalapeno.bench.dataset import WorkloadSpec
from jalapeno.errors import ConfigError, JalapenoError
from jalapeno.metrics import SLO, RequestOutcome, compute_metrics


class BenchFailed(JalapenoError):
    """No request (or no warm-up request) completed: the numbers would be zeros, not measurements."""


@dataclass(frozen=True)
class LoadSpec:
    """How requests are released. ``concurrency`` (closed loop) and a finite ``request_rate`` exclude each other."""

    concurrency: int | None = None
    request_rate: float = math.inf
    max_concurrency: int | None = None
    burstiness: float = 1.0
    num_warmups: int = 0
    seed: int = 0

    def validate(self) -> None:
        if self.concurrency is not None and self.concurrency <= 0:
            raise ConfigError(f"--concurrency must be > 0 (got {self.concurrency})")
        if self.concurrency is not None and math.isfinite(self.request_rate):
            raise ConfigError("give either --concurrency (closed loop) or --request-rate (open loop), not both")
        if not (self.request_rate > 0):
            raise ConfigError(f"--request-rate must be > 0 or 'inf' (got {self.request_rate})")
        if self.max_concurrency is not None and self.max_concurrency <= 0:
            raise ConfigError(f"--max-concurrency must be > 0 (got {self.max_concurrency})")
        if self.burstiness <= 0:
            raise ConfigError(f"--burstiness must be > 0 (got {self.burstiness})")
        if self.num_warmups < 0:
            raise ConfigError("--num-warmups must be >= 0")

    @property
    def in_flight_cap(self) -> int | None:
        return self.concurrency if self.concurrency is not None else self.max_concurrency


def arrival_offsets(n: int, load: LoadSpec) -> np.ndarray:
    """Release time (s from the start) of each of ``n`` requests."""
    if load.concurrency is not None or math.isinf(load.request_rate):
        return np.zeros(n)
    from jalapeno.workload import arrival_times

    return np.asarray(arrival_times(n, load.request_rate, burstiness=load.burstiness, seed=load.seed), dtype=float)


@dataclass
class BenchResult:
    metrics: dict
    outcomes: list[RequestOutcome]
    metadata: dict = field(default_factory=dict)
    power_note: str = ""

    def to_json(self, detailed: bool = False) -> dict:
        """Flat like vLLM's result file: run metadata, then exactly :func:`compute_metrics`' keys."""
        clash = set(self.metadata) & set(self.metrics)
        assert not clash, f"metadata keys shadow metrics: {clash}"
        out = {**self.metadata, **self.metrics}
        if detailed:
            out["requests"] = [
                {
                    "success": r.success,
                    "prompt_tokens": r.prompt_tokens,
                    "output_tokens": r.output_tokens,
                    "start_s": r.start_s,
                    "ttft_s": r.ttft_s,
                    "e2el_s": r.e2el_s,
                    "itl_s": list(map(float, r.itl_s)),
                    "error": r.error,
                }
                for r in self.outcomes
            ]
        return out


def is_loopback(base_url: str) -> bool:
    host = (urlparse(base_url).hostname or "").lower()
    return host in ("localhost", "127.0.0.1", "::1") or host.startswith("127.")


async def run_requests(
    cfg: EndpointConfig,
    requests: list[BenchRequest],
    arrivals: np.ndarray,
    cap: int | None,
    *,
    on_done: Callable[[RequestOutcome], None] | None = None,
    num_warmups: int = 0,
    marks: dict | None = None,
) -> tuple[list[RequestOutcome], float]:
    """Send ``requests`` at ``arrivals`` with at most ``cap`` in flight; returns (outcomes, duration s).
    ``marks`` (optional) gets the measured run's start on the monotonic clock and this process's CPU time then
    (``mono0``, ``cpu0``: after the warm-ups)."""
    conns = cap or len(requests)
    limits = httpx.Limits(max_connections=conns + 4, max_keepalive_connections=conns + 4)
    async with httpx.AsyncClient(limits=limits, timeout=None, trust_env=not is_loopback(cfg.base_url)) as client:
        if num_warmups:
            wsem = asyncio.Semaphore(cap or num_warmups)

            async def warm(r: BenchRequest) -> RequestOutcome:
                async with wsem:
                    return await send_request(client, cfg, r)

            warm_out = await asyncio.gather(*(warm(requests[i % len(requests)]) for i in range(num_warmups)))
            bad = [w for w in warm_out if not w.success]
            if len(bad) == len(warm_out):
                raise BenchFailed(f"every warm-up request failed; first error: {bad[0].error}")

        sem = asyncio.Semaphore(cap) if cap else None
        t0 = time.perf_counter()
        if marks is not None:
            marks.update(mono0=time.monotonic(), cpu0=time.process_time())

        async def one(r: BenchRequest) -> RequestOutcome:
            if sem is None:
                out = await send_request(client, cfg, r, t0=t0)
            else:
                async with sem:
                    out = await send_request(client, cfg, r, t0=t0)
            if on_done is not None:
                on_done(out)
            return out

        tasks = []
        for r, at in zip(requests, arrivals.tolist()):
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(r)))
        outcomes = list(await asyncio.gather(*tasks))
        return outcomes, time.perf_counter() - t0


def run_benchmark(
    cfg: EndpointConfig,
    requests: list[BenchRequest],
    load: LoadSpec,
    *,
    workload: WorkloadSpec | None = None,
    slo: SLO | None = None,
    num_chips: int = 1,
    power: bool | None = None,
    progress: bool = True,
) -> BenchResult:
    """Run the benchmark (blocking) and return metrics + per-request outcomes.

    ``power``: None = measure GPU power only when the server is on this machine (loopback URL); True = measure
    local GPUs anyway; False = never.
    """
    load.validate()
    if not requests:
        raise ConfigError("the workload has no requests")
    arrivals = arrival_offsets(len(requests), load)
    measure = is_loopback(cfg.base_url) if power is None else power

    from jalapeno.bench.power import PowerSampler

    sampler = PowerSampler() if measure else None
    if sampler is None:
        note = (
            "power not measured: the server is not on this machine"
            if power is None
            else "power not measured (--no-power)"
        )
    elif not sampler.available:
        note = f"power not measured: {sampler.reason}"
    else:
        note = "power measured over NVML on " + ", ".join(sampler.gpus)

    def go(on_done):
        coro = run_requests(cfg, requests, arrivals, load.in_flight_cap, on_done=on_done, num_warmups=load.num_warmups,
                            marks=marks)
        if sampler is not None and sampler.available:
            with sampler:
                return asyncio.run(coro)
        return asyncio.run(coro)

    marks: dict[str, float] = {}
    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True
        ) as bar:
            task = bar.add_task("requests", total=len(requests))
            outcomes, duration = go(lambda _o: bar.advance(task))
    else:
        outcomes, duration = go(None)
    #: this client's own CPU over the run (it shares the machine with a local server), and the run's window on
    #: the system-wide monotonic clock (to line it up with `jalapeno serve --step-trace`)
    client = {"client_cpu_s": time.process_time() - marks["cpu0"], "t_start_monotonic": marks["mono0"],
              "t_end_monotonic": time.monotonic()}

    energy = None
    if sampler is not None and sampler.available and sampler.reading is not None:
        energy = sampler.reading.energy_j
        if energy is None:
            note = "power not measured: too few NVML samples"
    metrics = compute_metrics(outcomes, duration, num_chips=num_chips, energy_j=energy, slo=slo)
    meta: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "base_url": cfg.base_url,
        "endpoint": cfg.endpoint,
        "model": cfg.model,
        "ignore_eos": cfg.ignore_eos,
        "concurrency": load.concurrency,
        "request_rate": "inf" if math.isinf(load.request_rate) else load.request_rate,
        "max_concurrency": load.max_concurrency,
        "burstiness": load.burstiness,
        "num_prompts": len(requests),
        "num_warmups": load.num_warmups,
        "goodput_slo": {k: v for k, v in asdict(slo).items() if v is not None} if slo else None,
        "power_note": note,
        **client,
    }
    if workload is not None:
        meta.update(
            dataset=workload.dataset,
            dataset_path=str(workload.dataset_path) if workload.dataset_path else None,
            input_len=workload.input_len,
            output_len=workload.output_len,
            random_range_ratio=workload.range_ratio,
            range_mode=workload.range_mode,
            seed=workload.seed,
        )
    return BenchResult(metrics, outcomes, meta, note)
