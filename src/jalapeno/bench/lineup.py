"""Served and simulated steps side by side, request by request, with unequal lengths (issue 16, thirteenth session).

A served step trace (``jalapeno serve --step-trace``) records each step's totals only (sequences that got a token,
prefill tokens, decoded tokens) and, per request, when it reached the scheduler's waiting queue. The scheduler is
deterministic given what is in its queue before each step, so :func:`replay_served` rebuilds every served step's
exact batch — which request prefilled how many tokens from where, which decoded at what context — by running the
one scheduler (over a :class:`~jalapeno.sim.SimBackend`, its timing unused) step for step with each request added
before the first served step that started after it was queued, and checks every rebuilt step's totals against the
trace (a :class:`ConfigError` at the first that differs). :func:`simulate_lined_up` runs the same requests through
the simulator's closed loop and records the same things on its virtual clock. Both give a :class:`Lineup`: per
request its send, arrival in the waiting queue, first scheduled step, the steps it prefilled in, its first token;
per step its batch and duration — and :func:`ttft_parts` splits each request's TTFT into the front end (send →
waiting queue), the wait in the queue (→ its first step's start) and its prefill (→ its first token).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from jalapeno.errors import ConfigError
from jalapeno.server.step_trace import RequestRecord, StepRecord


@dataclass
class LinedStep:
    """One engine step: its start and end (s), its prefill chunks as (request, tokens, cached prefix) and its
    decode rows as (request, context incl. the new token); ``steal_s``: the CPU time the hypervisor took from the
    machine over a served step (the step trace's, 0 for a simulated one)."""

    t_start: float
    t_end: float
    prefill: list[tuple[int, int, int]] = field(default_factory=list)
    decode: list[tuple[int, int]] = field(default_factory=list)
    steal_s: float = 0.0

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start

    @property
    def prefill_tokens(self) -> int:
        return sum(n for _, n, _ in self.prefill)

    def shape(self) -> tuple[list[tuple[int, int]], list[int]]:
        """(prefill chunks as (tokens, prefix), decode contexts): what ``StepShape.from_lists`` prices."""
        return [(n, p) for _, n, p in self.prefill], [c for _, c in self.decode]


@dataclass
class LinedRequest:
    """One request (its index in send order): lengths, and times on the run's clock (s)."""

    prompt: int
    output: int
    sent: float
    arrived: float = float("nan")  # handed to the engine (served: to the engine thread; simulated: its arrival)
    queued: float = float("nan")  # in the scheduler's waiting queue (served: the engine thread's drain, between steps)
    first_step: int = -1  # the first step it was scheduled in
    prefill_steps: list[int] = field(default_factory=list)
    first_token_step: int = -1

    def ttft(self, steps: Sequence[LinedStep]) -> float:
        return steps[self.first_token_step].t_end - self.sent


@dataclass
class Lineup:
    requests: list[LinedRequest]
    steps: list[LinedStep]

    def ttft_s(self) -> np.ndarray:
        return np.array([r.ttft(self.steps) for r in self.requests])

    def to_json(self) -> dict:
        """Per request (send order): lengths, send / arrival / waiting-queue times, first step, prefill steps, first
        token step and TTFT; per step: start, duration, prefill chunks [request, tokens, prefix], decode rows
        [request, context] (seconds from the run's start)."""
        return {"requests": [{"prompt": r.prompt, "output": r.output, "sent": r.sent, "arrived": r.arrived,
                              "queued": r.queued, "first_step": r.first_step, "prefill_steps": r.prefill_steps,
                              "first_token_step": r.first_token_step, "ttft": r.ttft(self.steps)}
                             for r in self.requests],
                "steps": [{"t_start": s.t_start, "duration": s.duration, "prefill": [list(c) for c in s.prefill],
                           "decode": [list(d) for d in s.decode]} for s in self.steps]}


def _recorder(engine, steps: list[LinedStep], who, clock) -> None:
    """Make ``engine``'s backend append each batch it executes to ``steps`` (one step per batch: the engine must be
    single-step); ``who(seq)``: the request a sequence is; times from ``clock`` (None: the caller fills them)."""
    backend = engine.backend
    run = backend.execute

    def execute(batch):
        st = LinedStep(clock() if clock else float("nan"), float("nan"))
        for c in batch.chunks:
            k = who(c.seq)
            if c.start < c.seq.prompt_len:
                st.prefill.append((k, c.num_tokens, c.start))
            else:
                st.decode.append((k, c.start + c.num_tokens))
        out = run(batch)
        if batch.num_steps != 1:  # pragma: no cover - the callers build single-step engines
            raise RuntimeError("lined-up steps need a single-step engine")
        if clock:
            st.t_end = st.t_start + out.duration_s
        steps.append(st)
        return out

    backend.execute = execute


def _requests_from_steps(reqs: list[LinedRequest], steps: list[LinedStep]) -> None:
    for i, st in enumerate(steps):
        for k, n, p in st.prefill:
            r = reqs[k]
            if r.first_step < 0:
                r.first_step = i
            r.prefill_steps.append(i)
            if p + n >= r.prompt:
                r.first_token_step = i


def match_records(sent: Sequence[float], prompts: Sequence[int], records: Sequence[RequestRecord],
                  window_end: float) -> list[RequestRecord]:
    """The trace's request record of each send (in send order): the k-th received in the window ``[sent[0],
    window_end]`` is the k-th sent (one connection per request, accepted in order), checked by prompt length — a
    :class:`ConfigError` when the counts or any length differ (the trace is of another run)."""
    order = np.argsort(np.asarray(sent, dtype=float), kind="stable")
    t0 = float(np.min(sent))
    recs = sorted((r for r in records if t0 - 1e-3 <= r.t_recv <= window_end), key=lambda r: r.t_recv)
    if len(recs) != len(sent):
        raise ConfigError(f"{len(sent)} requests sent but {len(recs)} request records in the step trace's window: "
                          "trace the same run with `jalapeno serve --step-trace`")
    out: list[RequestRecord | None] = [None] * len(sent)
    for rec, k in zip(recs, order):
        if rec.prompt_tokens != int(prompts[k]):
            raise ConfigError(f"request {k}: the trace's record has {rec.prompt_tokens} prompt tokens, the bench sent "
                              f"{int(prompts[k])}: not the same run (or not the same lengths)")
        out[k] = rec
    return out  # type: ignore[return-value]


def replay_served(steps: Sequence[StepRecord], records: Sequence[RequestRecord], sent: Sequence[float],
                  prompts: Sequence[int], outputs: Sequence[int], t0: float, t1: float, cost_model, *,
                  max_num_seqs: int = 256, max_num_batched_tokens: int = 8192, block_size: int = 16,
                  kv_tokens: int | None = None) -> Lineup:
    """The served run's steps in the window ``[t0, t1]`` (a bench run's monotonic window) rebuilt batch by batch.
    ``sent``: each request's send (monotonic s), ``prompts`` / ``outputs``: its lengths (the bench's), all in send
    order; the engine limits are the server's (``jalapeno serve``'s defaults; ``kv_tokens``: its KV cache, as
    ``/metrics`` gives it, so the replay preempts where it did); ``cost_model``: any (the replay's
    times are the trace's). Times in the result are seconds after ``t0``. Every rebuilt step's sequences with a
    token, prefill tokens and decoded tokens must equal the trace's (else a :class:`ConfigError` naming the step:
    another workload, another scheduler, or lost records)."""
    from jalapeno.engine.config import EngineConfig
    from jalapeno.engine.engine import Engine
    from jalapeno.engine.sequence import SamplingParams
    from jalapeno.engine.sequence import Sequence as Seq
    from jalapeno.bench.compare import kv_capped

    n = len(sent)
    if not (len(prompts) == len(outputs) == n) or n == 0:
        raise ConfigError(f"{n} sends but {len(prompts)} prompt and {len(outputs)} output lengths")
    recs = match_records(sent, prompts, records, t1)
    reqs = [LinedRequest(int(prompts[k]), int(outputs[k]), float(sent[k]) - t0, recs[k].t_submit - t0,
                         recs[k].t_queued - t0) for k in range(n)]
    window = [s for s in steps if t0 <= s.t_start]
    cfg = EngineConfig(block_size=block_size, max_num_seqs=max_num_seqs,
                       max_num_batched_tokens=max_num_batched_tokens)
    backend = kv_capped(kv_tokens)(cost_model, max_batch_tokens=cfg.max_num_batched_tokens,
                                   state_seqs=cfg.max_num_seqs)
    backend.max_multi_step = 1
    engine = Engine(backend, cfg)
    lined: list[LinedStep] = []
    index: dict[int, int] = {}
    _recorder(engine, lined, lambda seq: index[seq.seq_id], None)
    todo = sorted(range(n), key=lambda k: recs[k].t_queued)
    j = 0
    for i, s in enumerate(window):
        while j < n and recs[todo[j]].t_queued <= s.t_start:
            k = todo[j]
            seq = Seq.length_only(SamplingParams(max_tokens=reqs[k].output, ignore_eos=True), reqs[k].prompt, 0.0)
            index[seq.seq_id] = k
            engine.add_sequence(seq)
            j += 1
        if not engine.has_unfinished():
            if j >= n:
                break  # the window's requests are done; later steps are another run's
            raise ConfigError(f"served step {i + 1} of the window ran with no request of the run queued before "
                              "it: the trace's records do not cover this run")
        before = (engine.prompt_tokens_computed, engine.tokens_generated)
        outs = engine.step()
        got = (len(outs), engine.prompt_tokens_computed - before[0], engine.tokens_generated - before[1])
        want = (s.seqs, s.prefill_tokens, s.decode_tokens)
        if got != want:
            raise ConfigError(f"served step {i + 1} of the window: the trace has {want[0]} sequences with a token, "
                              f"{want[1]} prefill and {want[2]} decoded tokens, the scheduler's replay {got[0]}, "
                              f"{got[1]}, {got[2]}: not this workload, or another scheduler")
        lined[-1].t_start, lined[-1].t_end = s.t_start - t0, s.t_end - t0
        lined[-1].steal_s = s.steal_s
    if j < n or engine.has_unfinished():
        raise ConfigError(f"the trace ends with {n - j} of the run's requests never queued or some unfinished: "
                          "trace the whole run")
    _requests_from_steps(reqs, lined)
    return Lineup(reqs, lined)


def admitted_first_wave(steps: Sequence[StepRecord], records: Sequence[RequestRecord], sent: Sequence[float],
                        prompts: Sequence[int], t1: float, concurrency: int) -> tuple[list[int], np.ndarray]:
    """How a served run's idle engine took its closed loop's first wave (the run's initial condition): the first
    ``concurrency`` requests (by send) in the order they reached the waiting queue, and release offsets (s) that
    make a simulated engine admit them alike — those queued before the first step that prefilled at 0, the rest
    :data:`~jalapeno.server.ingest.LATE_S` later (the next step). With unequal lengths the order matters: which
    prompt prefilled first decides which stream ends first, and so every later wave."""
    from jalapeno.server.ingest import LATE_S

    recs = match_records(sent, prompts, records, t1)
    c = min(int(concurrency), len(recs))
    t0 = float(np.min(sent))
    first = next((s for s in steps if s.t_start >= t0 and s.prefill_tokens > 0), None)
    if first is None:
        raise ConfigError(f"no prefilling step at or after {t0:.3f} s in the step trace: trace the same run")
    wave = sorted(np.argsort(np.asarray(sent, dtype=float), kind="stable")[:c].tolist(), key=lambda k: recs[k].t_queued)
    k = max(1, sum(1 for j in wave if recs[j].t_queued <= first.t_start))
    return wave, np.concatenate([np.zeros(k), np.full(c - k, LATE_S)])


def simulate_lined_up(cost_model, sent: Sequence[float], prompts: Sequence[int], outputs: Sequence[int],
                      concurrency: int, *, as_sent: bool = True,
                      first_wave: tuple[list[int], np.ndarray] | None = None, kv_tokens: int | None = None) -> Lineup:
    """The same requests through the simulator's closed loop of ``concurrency`` (the first wave released as the
    bench sent it, ``as_sent``, else together, or as ``first_wave`` says: its requests in that order at those
    offsets, :func:`admitted_first_wave`; the chip's ``request_overhead_ms`` delays every arrival; ``kv_tokens``:
    the served engine's KV capacity), one step per engine step, lined up as :func:`replay_served` lines up the served run (times from the first send)."""
    from jalapeno.bench.compare import first_wave_arrivals
    from jalapeno.sim import build_sim_engine, run_workload
    from jalapeno.workload import Workload

    n = len(sent)
    isl, osl = np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64)
    perm = np.arange(n)
    if first_wave is not None:
        order, offsets = first_wave
        c = len(order)
        if sorted(order) != sorted(np.argsort(np.asarray(sent, dtype=float), kind="stable")[:c].tolist()):
            raise ConfigError("first_wave must order the first requests sent")
        perm = np.concatenate([np.asarray(order, dtype=np.int64), np.arange(c, n)])
        rel = np.concatenate([offsets, np.full(n - c, offsets[-1])])
        wl = Workload(isl[perm], osl[perm], arrival_s=first_wave_arrivals(rel, concurrency),
                      max_concurrency=concurrency)
    elif as_sent:
        wl = Workload(isl, osl, arrival_s=first_wave_arrivals(sent, concurrency), max_concurrency=concurrency)
    else:
        wl = Workload(isl, osl, concurrency=concurrency)
    from jalapeno.bench.compare import kv_capped

    engine = build_sim_engine(cost_model, in_flight=concurrency, single_step=True, backend_cls=kv_capped(kv_tokens))
    lined: list[LinedStep] = []
    seen: dict[int, object] = {}

    def who(seq) -> int:
        k = int(perm[seq.user_data.chain])  # the client's call: one per chain, its chain the request's slot
        seen[k] = seq
        return k

    _recorder(engine, lined, who, engine.clock.now)
    run_workload(engine, wl)
    reqs = [LinedRequest(int(isl[k]), int(osl[k]), seen[k].user_data.send_s, seen[k].arrival_s, seen[k].arrival_s)
            for k in range(n)]
    _requests_from_steps(reqs, lined)
    return Lineup(reqs, lined)


def ttft_parts(lineup: Lineup) -> dict[str, np.ndarray]:
    """Each request's TTFT split (s): ``front`` send → handed to the engine (HTTP, tokenisation; the simulated
    front end), ``wait`` → its first step's start (the step running when it came, and any steps it waited in the
    queue), ``prefill`` → its first token (the end of its last prefill step); ``chunks``: its prefill steps;
    ``ttft`` the sum."""
    st = lineup.steps
    rs = lineup.requests
    return {"front": np.array([r.arrived - r.sent for r in rs]),
            "wait": np.array([st[r.first_step].t_start - r.arrived for r in rs]),
            "prefill": np.array([st[r.first_token_step].t_end - st[r.first_step].t_start for r in rs]),
            "chunks": np.array([len(r.prefill_steps) for r in rs]),
            "ttft": lineup.ttft_s()}


def prefill_groups(lineup: Lineup) -> list[tuple[tuple[int, ...], int]]:
    """Each step that prefilled, in order: (the requests it prefilled, sorted; its decode rows) — the shape of a
    closed loop's ingest that two runs of the same requests share when they admit alike."""
    return [(tuple(sorted(k for k, _, _ in s.prefill)), len(s.decode)) for s in lineup.steps if s.prefill]


def step_kind(step: LinedStep, panel_min_rows: int | None = None) -> str:
    """The engine path a step takes on CPU: decode only (by batch band; with ``panel_min_rows``, the fused kernel's
    dot tiles below it), fresh prompts alone (starting at 0, no decode row), else mixed (the PyTorch path's
    paged attention: a later chunk, or prompts beside decode rows)."""
    pre, dec = step.shape()
    if not pre:
        b = len(dec)
        tiles = "" if panel_min_rows is None else (" dot tiles" if b < panel_min_rows else " panels")
        return f"decode b={b}" + tiles if b < 8 else f"decode b={b // 8 * 8}-{b // 8 * 8 + 7}" + tiles
    if not dec and all(p == 0 for _, p in pre):
        return f"fresh {len(pre)} prompt{'s' if len(pre) > 1 else ''}"
    return f"mixed {len(pre)} prompt{'s' if len(pre) > 1 else ''} + decode"


def priced_steps(lineup: Lineup, cost_model) -> list[tuple[LinedStep, float, float]]:
    """Every step of ``lineup`` (its exact batch) as (step, measured s, priced s on ``cost_model``)."""
    from jalapeno.perf.shape import StepShape

    out = []
    for s in lineup.steps:
        pre, dec = s.shape()
        out.append((s, s.duration, cost_model.step(StepShape.from_lists(prefill=pre, decode_ctx=dec)).time_s))
    return out


def price_by_kind(lineup: Lineup, cost_model, panel_min_rows: int | None = None) -> list[dict]:
    """Every step of ``lineup`` (its exact batch) against its price on ``cost_model``, grouped by
    :func:`step_kind`: steps, measured and priced seconds in all, the median ratio measured / priced."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for s, measured, priced in priced_steps(lineup, cost_model):
        groups.setdefault(step_kind(s, panel_min_rows), []).append((measured, priced))
    order = sorted(groups, key=lambda k: (not k.startswith("decode"), int(k.split("=")[1].split("-")[0].split()[0])
                                          if k.startswith("decode") else 0, k))
    return [{"kind": k, "steps": len(groups[k]), "measured_s": sum(m for m, _ in groups[k]),
             "priced_s": sum(p for _, p in groups[k]),
             "median_ratio": float(np.median([m / p for m, p in groups[k]]))} for k in order]


def steal_split(lineup: Lineup, cost_model, min_share: float = 0.01, cpus: int = 1) -> dict[str, dict]:
    """The served steps of ``lineup`` against their price on ``cost_model``, split by whether the hypervisor took
    CPU time from the machine during the step (``steal_s`` over the step's duration x ``cpus`` above ``min_share``:
    "steal") or not ("quiet"): per side the steps, measured and priced seconds in all and the median step's
    measured / priced, so a point's error can be split into what the host took and what the cost model says."""
    sides: dict[str, list[tuple[float, float]]] = {"quiet": [], "steal": []}
    for s, measured, priced in priced_steps(lineup, cost_model):
        share = s.steal_s / (measured * cpus) if measured > 0 else 0.0
        sides["steal" if share > min_share else "quiet"].append((measured, priced))
    return {k: {"steps": len(v), "measured_s": sum(m for m, _ in v), "priced_s": sum(p for _, p in v),
                "median_ratio": float(np.median([m / p for m, p in v])) if v else float("nan")}
            for k, v in sides.items()}


def steps_waited(lineup: Lineup) -> list[int]:
    """Per request, the steps it waited out between its send and its first step (those running or started in that
    span): 0 when it joined the very next step, 1 when it came during a step and waited for its end, more when it
    waited in the queue (a token budget, a sequence cap)."""
    st = lineup.steps
    return [sum(1 for s in st[:r.first_step] if s.t_end > r.sent) for r in lineup.requests]
