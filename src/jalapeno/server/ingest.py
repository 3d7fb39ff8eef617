"""The serving layer's ingest of a closed loop's waves, measured (issue 16).

A closed-loop client sends a *wave* of requests when a step's outputs complete that many streams. Each request
then crosses the serving layer before the engine can schedule it: the HTTP handler (on the event loop), the
prompt's tokenisation (a worker thread), the hand-over to the engine thread, and the engine thread's drain of its
command queue — which happens only between two engine steps. :func:`line_up` puts, for every measured request,
the bench client's send time (``jalapeno bench --save-detailed``: ``start_s`` after the run's monotonic start)
beside the server's request record (``jalapeno serve --step-trace``: :class:`~jalapeno.server.step_trace.
RequestRecord`) on the one system-wide monotonic clock; :func:`by_position` gives the median delays by a request's
position in its wave, :func:`service_time` the spacing of a wave's hand-overs, :func:`front_end_latency_s` the
latency send → hand-over (what ``efficiency.request_overhead_ms`` prices in the simulated client) and
:func:`first_wave_release` when a served run's first wave reached the waiting queue (how the engine split it over
its first steps: the initial condition that, with equal output lengths, every later wave repeats).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from jalapeno.errors import ConfigError
from jalapeno.server.step_trace import RequestRecord, StepRecord


@dataclass(frozen=True)
class IngestRow:
    """One request from the client's send to the engine's waiting queue (monotonic seconds)."""

    sent: float  # the client sent it
    recv: float  # the server's handler started
    tokenised: float
    submit: float  # handed to the engine thread
    queued: float  # in the scheduler's waiting queue (between two steps)
    prompt_tokens: int
    wave: int  # the step whose outputs preceded the send (the completions that released it); -1: none
    position: int  # its rank among the requests of its wave, by send time (0 = first)
    step_at_submit: bool  # an engine step was running when it was handed to the engine thread
    first_step: int  # index of the first step that started after it was queued (-1: none in the trace)

    @property
    def delay(self) -> float:
        """Send to waiting queue: the whole ingest."""
        return self.queued - self.sent


def line_up(sent: Sequence[float], requests: Sequence[RequestRecord], steps: Sequence[StepRecord],
            window_end: float | None = None) -> list[IngestRow]:
    """Match a bench run's sends (monotonic s, any order) with the trace's request records received in its window
    (from the first send to ``window_end``, default the last send + 600 s), in order: the k-th send is the k-th
    request received (one connection per request, accepted in order). Fewer or more records than sends in the
    window is a :class:`ConfigError` (the trace is of another run, or the bench sent requests elsewhere)."""
    sends = sorted(float(t) for t in sent)
    if not sends:
        raise ConfigError("no send times to line up: run `jalapeno bench --save-detailed` (sim_vs_engine.py does)")
    end = sends[-1] + 600.0 if window_end is None else window_end
    recs = sorted((r for r in requests if sends[0] - 1e-3 <= r.t_recv <= end), key=lambda r: r.t_recv)
    if len(recs) != len(sends):
        raise ConfigError(f"{len(sends)} requests sent but {len(recs)} request records in the step trace between "
                          f"{sends[0]:.3f} and {end:.3f} s: trace the same run with `jalapeno serve --step-trace`")
    done = [s.t_done for s in steps]
    starts = [s.t_start for s in steps]
    waves = [bisect.bisect_right(done, t) - 1 for t in sends]
    rows: list[IngestRow] = []
    for k, (t, r, w) in enumerate(zip(sends, recs, waves)):
        pos = sum(1 for j in range(k) if waves[j] == w)
        i = bisect.bisect_right(starts, r.t_submit) - 1  # the last step that started before the hand-over
        in_step = i >= 0 and steps[i].t_start <= r.t_submit < steps[i].t_end
        first = bisect.bisect_left(starts, r.t_queued)
        rows.append(IngestRow(t, r.t_recv, r.t_tokenised, r.t_submit, r.t_queued, r.prompt_tokens, w, pos, in_step,
                              first if first < len(steps) else -1))
    return rows


def by_position(rows: Sequence[IngestRow]) -> list[dict]:
    """Per position in a wave: how many requests, and the median ms of each part of the ingest (send → handler,
    handler → tokenised, tokenised → engine thread, engine thread → waiting queue, send → waiting queue), the share
    handed over while a step ran, and the median size of the first step each got into (its prefill tokens come
    from the step records, so here the step index's distance from the wave's first step: 0 = the wave's first)."""
    out = []
    for p in sorted({r.position for r in rows}):
        sel = [r for r in rows if r.position == p]
        med = lambda v: float(np.median(v)) * 1e3  # noqa: E731
        out.append({
            "position": p, "requests": len(sel),
            "http_ms": med([r.recv - r.sent for r in sel]),
            "tokenise_ms": med([r.tokenised - r.recv for r in sel]),
            "handover_ms": med([r.submit - r.tokenised for r in sel]),
            "to_queue_ms": med([r.queued - r.submit for r in sel]),
            "delay_ms": med([r.delay for r in sel]),
            "step_at_submit": sum(r.step_at_submit for r in sel) / len(sel),
        })
    return out


def service_time(rows: Sequence[IngestRow]) -> float:
    """Seconds per request of a serial front end: the median spacing of consecutive hand-overs (``submit``) within
    a wave, over the hand-overs that no engine step overlapped (a step's work on the same cores stretches them);
    a :class:`ConfigError` when no wave has two such requests."""
    gaps = []
    by_wave: dict[int, list[IngestRow]] = {}
    for r in rows:
        by_wave.setdefault(r.wave, []).append(r)
    for wave in by_wave.values():
        wave.sort(key=lambda r: r.position)
        for a, b in zip(wave, wave[1:]):
            if not (a.step_at_submit or b.step_at_submit):
                gaps.append(b.submit - a.submit)
    if not gaps:
        raise ConfigError("no wave has two requests handed over outside an engine step: a closed loop at "
                          "concurrency >= 2 has them")
    return float(np.median(gaps))


def front_end_latency_s(rows: Sequence[IngestRow]) -> float:
    """The serving layer's latency per request, seconds: the median of send → hand-over to the engine thread (HTTP,
    tokenisation, the hand-over itself; not the wait for the running step to end, which the simulated engine
    prices). What ``efficiency.request_overhead_ms`` adds to each simulated arrival."""
    if not rows:
        raise ConfigError("no requests to measure the front end's latency on")
    return float(np.median([r.submit - r.sent for r in rows]))


#: seconds after the admitted ones at which the rest of a first wave is released: any time after the first step's
#: start puts them in the next step (the engine takes its waiting queue only between steps), and their clocks start
#: within the few ms over which the client sent the wave
LATE_S = 1e-3


def first_wave_release(steps: Sequence[StepRecord], t0: float, concurrency: int, prompt_len: int,
                       requests: Sequence[RequestRecord] = ()) -> np.ndarray:
    """Offsets (s) at which to release a closed loop's first ``concurrency`` requests so that the engine admits them
    as it did in a served run whose measured window starts at ``t0`` (monotonic s): the first step that started at
    or after ``t0`` and prefilled took ``k`` of them (those the request records show queued by its start; without
    records, its prefill tokens / ``prompt_len``), released at 0; the rest had not reached the waiting queue then
    and are released :data:`LATE_S` later (they go into the next step). With equal output lengths the split repeats
    at every later wave: a wave's first ``k`` finish a step before the rest. No prefilling step after ``t0`` is a
    :class:`ConfigError`."""
    c = int(concurrency)
    if c < 1 or prompt_len < 1:
        raise ConfigError(f"concurrency ({concurrency}) and prompt length ({prompt_len}) must be >= 1")
    first = next((s for s in steps if s.t_start >= t0 and s.prefill_tokens > 0), None)
    if first is None:
        raise ConfigError(f"no prefilling step at or after {t0:.3f} s in the step trace: trace the same run")
    mine = [r for r in requests if r.t_recv >= t0 - 1e-3]
    if len(mine) >= c:
        k = sum(1 for r in mine if r.t_queued <= first.t_start)
    else:
        k = first.prefill_tokens // prompt_len
    k = max(1, min(c, k))
    return np.concatenate([np.zeros(k), np.full(c - k, LATE_S)])


@dataclass(frozen=True)
class FirstWave:
    """How an idle engine took a closed loop's first wave (seconds): ``admitted`` of its ``size`` requests were in
    the waiting queue when the first step started, ``pickup_s`` after the first hand-over; before that step the
    hand-overs came ``spacing_s`` apart (median; None with fewer than two). ``predicted`` = 1 + the interpreter's
    switch interval / spacing: the engine thread, woken by the first hand-over, waits for the GIL while the event
    loop keeps handing requests over back to back (CPython forces a switch after ``sys.getswitchinterval()``, 5 ms),
    so it takes those handed over meanwhile — the hypothesis the quiet served run is to check (docs/fidelity.md)."""

    size: int
    admitted: int
    pickup_s: float
    spacing_s: float | None
    predicted: float | None


def first_wave(rows: Sequence[IngestRow], steps: Sequence[StepRecord], switch_interval_s: float = 0.005) -> FirstWave:
    """:class:`FirstWave` of the first wave in ``rows`` (those of the earliest wave); a :class:`ConfigError` when
    none of them reached a step of the trace."""
    if not rows:
        raise ConfigError("no requests: line a traced run up first (line_up)")
    w = min(r.wave for r in rows)
    wave = sorted((r for r in rows if r.wave == w), key=lambda r: r.submit)
    first = min((r.first_step for r in wave if r.first_step >= 0), default=-1)
    if first < 0:
        raise ConfigError("the first wave reached no step of the trace: trace the whole run")
    start = steps[first].t_start
    before = [r.submit for r in wave if r.submit <= start]
    spacing = float(np.median(np.diff(before))) if len(before) > 1 else None
    return FirstWave(len(wave), sum(1 for r in wave if r.first_step == first), start - wave[0].submit, spacing,
                     1 + switch_interval_s / spacing if spacing else None)
