"""Serving metrics, defined exactly as vLLM's ``bench serve`` defines them (one module for the simulator and
the bench client, so their numbers mean the same thing).

Per request (times in seconds from the request's start):
  * TTFT  = time of the first chunk that carries generated content;
  * E2EL  = time of the last such chunk;
  * TPOT  = (E2EL - TTFT) / (output_tokens - 1), only for requests with more than one output token;
  * ITL   = gaps between consecutive content chunks (one value per gap, pooled over all requests).
Aggregates: mean / median / std / p90 / p99 of each (ms), throughputs over the benchmark ``duration``,
``median_interactivity`` = 1000 / median TPOT (tokens/s/user, InferenceX), per-chip throughputs, power and
tokens per joule (``None`` when power was not measured: never invented), and goodput under optional SLOs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

PERCENTILES: tuple[int, ...] = (90, 99)


@dataclass
class RequestOutcome:
    """What one request produced, as a client observes it."""

    success: bool = True
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float = 0.0
    e2el_s: float = 0.0
    #: inter-token gaps (s). For simulated runs they may be given compressed as ``itl_s`` values with
    #: matching ``itl_counts`` (how many gaps had that value); ``None`` counts mean one gap per value.
    itl_s: Sequence[float] | np.ndarray = field(default_factory=list)
    itl_counts: Sequence[int] | np.ndarray | None = None
    start_s: float = 0.0
    error: str = ""

    @property
    def tpot_s(self) -> float | None:
        if self.output_tokens > 1:
            return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)
        return None


@dataclass(frozen=True)
class SLO:
    """Goodput service-level objectives in milliseconds (vLLM ``--goodput ttft:MS tpot:MS e2el:MS``)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def met(self, r: RequestOutcome) -> bool:
        if not r.success:
            return False
        if self.ttft_ms is not None and r.ttft_s * 1000 > self.ttft_ms:
            return False
        tpot = r.tpot_s
        if self.tpot_ms is not None and tpot is not None and tpot * 1000 > self.tpot_ms:
            return False
        if self.e2el_ms is not None and r.e2el_s * 1000 > self.e2el_ms:
            return False
        return True

    @property
    def empty(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None and self.e2el_ms is None

    @classmethod
    def parse(cls, items: Iterable[str]) -> "SLO":
        """Parse ``["ttft:200", "tpot:50"]`` (vLLM's --goodput syntax)."""
        from jalapeno.errors import ConfigError

        kw: dict[str, float] = {}
        for item in items:
            for part in item.replace(",", " ").split():
                name, _, val = part.partition(":")
                key = f"{name.strip().lower()}_ms"
                if key not in ("ttft_ms", "tpot_ms", "e2el_ms"):
                    raise ConfigError(f"goodput SLO '{part}': name must be ttft, tpot or e2el (e.g. ttft:200)")
                try:
                    kw[key] = float(val)
                except ValueError:
                    raise ConfigError(f"goodput SLO '{part}': '{val}' is not a number of milliseconds") from None
                if kw[key] <= 0:
                    raise ConfigError(f"goodput SLO '{part}': must be > 0 ms")
        return cls(**kw)


def _median_sorted(s: np.ndarray) -> float:
    """``np.median`` of the array whose sorted copy is ``s`` (float64, non-empty), the same float: the middle
    value or the mean of the two middle ones (``np.mean``: their sum halved), NaN when any value is NaN."""
    n = s.size
    if s[-1] != s[-1]:
        return float("nan")
    h = n // 2
    return float(s[h]) if n % 2 else float(np.mean(s[h - 1 : h + 1]))


def _percentile_sorted(s: np.ndarray, q: float) -> float:
    """``np.percentile(values, q)`` (method ``linear``) of the array whose sorted copy is ``s`` (float64,
    non-empty), operation for operation as numpy 2 does it: virtual index ``(n - 1)·q/100``, its floor and
    the next (both the last past the end), ``a + (b - a)·γ``, or ``b - (b - a)·(1 - γ)`` when ``γ ≥ 0.5``;
    NaN when any value is NaN."""
    n = s.size
    if s[-1] != s[-1]:
        return float("nan")
    vi = (n - 1) * (q / 100)
    if vi >= n - 1:
        prev = nxt = -1
    else:
        prev = int(np.floor(vi))
        nxt = prev + 1
    gamma = vi - prev
    a, b = float(s[prev]), float(s[nxt])
    d = b - a
    return b - d * (1 - gamma) if gamma >= 0.5 else a + d * gamma


def _stats(name: str, values_ms: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    if values_ms.size == 0:
        out[f"mean_{name}_ms"] = 0.0
        out[f"median_{name}_ms"] = 0.0
        out[f"std_{name}_ms"] = 0.0
        for p in PERCENTILES:
            out[f"p{p}_{name}_ms"] = 0.0
        return out
    if weights is None:
        out[f"mean_{name}_ms"] = float(np.mean(values_ms))
        # np.median / np.percentile's values from one sorted copy: those two import numpy.ma on first use
        # (≈ 20 ms of every simulate process); other dtypes keep numpy's own functions
        fast = values_ms.dtype == np.float64 and values_ms.ndim == 1
        s = np.sort(values_ms) if fast else values_ms
        out[f"median_{name}_ms"] = _median_sorted(s) if fast else float(np.median(values_ms))
        out[f"std_{name}_ms"] = float(np.std(values_ms))
        for p in PERCENTILES:
            out[f"p{p}_{name}_ms"] = _percentile_sorted(s, p) if fast else float(np.percentile(values_ms, p))
        return out
    # weighted (compressed) samples: identical to expanding each value `weight` times
    order = np.argsort(values_ms, kind="stable")
    v = values_ms[order]
    w = weights[order].astype(np.float64)
    n = w.sum()
    mean = float((v * w).sum() / n)
    out[f"mean_{name}_ms"] = mean
    out[f"std_{name}_ms"] = float(np.sqrt((w * (v - mean) ** 2).sum() / n))
    cum = np.cumsum(w)

    def pct(q: float) -> float:
        # numpy's default 'linear' percentile on the expanded array: rank = q/100 * (n - 1)
        rank = q / 100.0 * (n - 1)
        lo = int(np.floor(rank))
        hi = min(lo + 1, int(n) - 1)
        vlo = v[np.searchsorted(cum, lo + 1)]
        vhi = v[np.searchsorted(cum, hi + 1)]
        return float(vlo + (vhi - vlo) * (rank - lo))

    out[f"median_{name}_ms"] = pct(50)
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = pct(p)
    return out


def _per_request_itls(ok: Sequence[RequestOutcome]) -> tuple[np.ndarray, np.ndarray | None]:
    """The requests' own inter-token gaps (ms), and their weights when any request gives them compressed."""
    itl_vals: list[np.ndarray] = []
    itl_w: list[np.ndarray] = []
    weighted = any(r.itl_counts is not None for r in ok)
    for r in ok:
        v = np.asarray(r.itl_s, dtype=np.float64)
        if v.size == 0:
            continue
        itl_vals.append(v * 1000)
        if weighted:
            itl_w.append(np.ones_like(v) if r.itl_counts is None else np.asarray(r.itl_counts, dtype=np.float64))
    itl = np.concatenate(itl_vals) if itl_vals else np.zeros(0)
    return itl, (np.concatenate(itl_w) if (weighted and itl_w) else None)


def _tpot_s(ttft_s: np.ndarray, e2el_s: np.ndarray, output_tokens: np.ndarray, more: np.ndarray) -> np.ndarray:
    """:attr:`RequestOutcome.tpot_s` of every request at once (``more``: ``output_tokens > 1``), NaN where it is
    None: the same float operations, element by element."""
    out = np.full(ttft_s.shape, np.nan)
    out[more] = (e2el_s[more] - ttft_s[more]) / (output_tokens[more] - 1)
    return out


def _count_met(slo: SLO, ttft_s: np.ndarray, tpot_s: np.ndarray, e2el_s: np.ndarray) -> int:
    """How many successful requests :meth:`SLO.met` accepts, from their columns (``tpot_s`` NaN: none; a NaN
    compares false, as ``None`` skips the check): the same comparisons, element by element."""
    bad = np.zeros(ttft_s.shape, dtype=bool)
    if slo.ttft_ms is not None:
        bad |= ttft_s * 1000 > slo.ttft_ms
    if slo.tpot_ms is not None:
        bad |= tpot_s * 1000 > slo.tpot_ms
    if slo.e2el_ms is not None:
        bad |= e2el_s * 1000 > slo.e2el_ms
    return int(ttft_s.size - np.count_nonzero(bad))


def compute_metrics(
    outcomes: Sequence[RequestOutcome],
    duration_s: float,
    *,
    num_chips: int = 1,
    energy_j: float | None = None,
    slo: SLO | None = None,
    output_chips: int | None = None,
    itl_values: Sequence[float] | np.ndarray | None = None,
    itl_counts: Sequence[int] | np.ndarray | None = None,
    energy_source: str = "measured",
) -> dict:
    """Aggregate request outcomes into the vLLM/InferenceX metrics object (same keys for sim and bench).

    ``energy_j`` is the energy of all chips over ``duration_s``; None means power was not measured.
    ``energy_source``: "measured" (a power meter) or "predicted" (the simulator's energy model); reported as
    ``power_source`` (None without energy) and ``power_measured`` (true only for a measurement).
    ``output_chips`` divides output throughput per chip when disaggregated (InferenceX divides by decode GPUs).
    ``itl_values`` (s) with optional ``itl_counts``: inter-token gaps already pooled over all requests (the
    simulator's compressed form); when given they replace the per-request ``itl_s``.
    """
    ok = [r for r in outcomes if r.success]
    total_in = int(sum(r.prompt_tokens for r in ok))
    total_out = int(sum(r.output_tokens for r in ok))
    dur = float(duration_s) if duration_s > 0 else float("nan")
    ttft_s = np.array([r.ttft_s for r in ok], dtype=np.float64)
    e2el_s = np.array([r.e2el_s for r in ok], dtype=np.float64)
    ttft, e2el = ttft_s * 1000, e2el_s * 1000
    out_tokens = np.array([r.output_tokens for r in ok], dtype=np.int64)
    more = out_tokens > 1  # the requests with a TPOT
    tpot_s = _tpot_s(ttft_s, e2el_s, out_tokens, more)
    tpot = tpot_s[more] * 1000

    if itl_values is None:
        itl, itl_weights = _per_request_itls(ok)
    else:
        itl = np.asarray(itl_values, dtype=np.float64) * 1000
        itl_weights = None if itl_counts is None else np.asarray(itl_counts, dtype=np.float64)
        if itl_weights is not None and itl_weights.shape != itl.shape:
            raise ValueError("itl_counts must match itl_values")

    m: dict = {
        "completed": len(ok),
        "failed": len(outcomes) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "duration": float(duration_s),
        "request_throughput": len(ok) / dur,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
    }
    m.update(_stats("ttft", ttft))
    m.update(_stats("tpot", tpot))
    m.update(_stats("itl", itl, itl_weights))
    m.update(_stats("e2el", e2el))
    m["median_interactivity"] = 1000.0 / m["median_tpot_ms"] if m["median_tpot_ms"] > 0 else 0.0
    m["num_chips"] = int(num_chips)
    m["output_throughput_per_chip"] = m["output_throughput"] / (output_chips or num_chips)
    m["total_token_throughput_per_chip"] = m["total_token_throughput"] / num_chips
    if energy_j is not None and duration_s > 0:
        # all chips (the deployment), and the same divided over them; ``avg_power_w`` is kept as the
        # deployment figure for consumers written before the split (its name reads per chip: prefer the two)
        m["avg_power_w_deployment"] = energy_j / duration_s
        m["avg_power_w_per_chip"] = m["avg_power_w_deployment"] / num_chips
        m["avg_power_w"] = m["avg_power_w_deployment"]
        m["output_tokens_per_joule"] = total_out / energy_j if energy_j > 0 else None
        m["power_measured"] = energy_source == "measured"
        m["power_source"] = energy_source
    else:
        m["avg_power_w_deployment"] = m["avg_power_w_per_chip"] = m["avg_power_w"] = None
        m["output_tokens_per_joule"] = None
        m["power_measured"] = False
        m["power_source"] = None
    if slo is not None and not slo.empty:
        good = _count_met(slo, ttft_s, tpot_s, e2el_s)
        m["request_goodput"] = good / dur
        m["slo_attainment"] = good / len(outcomes) if outcomes else 0.0
    return m
