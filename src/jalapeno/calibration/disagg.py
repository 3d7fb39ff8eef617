"""Disaggregated InferenceX points as ``jalapeno simulate`` scenarios: one pool per side, as the layout names it.

A layout ``P: 1 worker(s) x TP1 EP8 DPattn=True (8 GPUs); D: 2 worker(s) x TP8 EP8 DPattn=False (16 GPUs)``
(parsed into :class:`~jalapeno.calibration.points.DisaggLayout` by ``points.parse_disagg_layout``) becomes a
:class:`~jalapeno.sim.scenario.Scenario` with per-pool fields:

* ``<pool>_workers`` = the worker count; ``<pool>_chips_per_worker`` = GPUs / workers (the GPU count is the
  reliable part of the string: the harness often records TP1 for a dp-attention worker spanning 8 GPUs);
* ``<pool>_dp_attention`` = the recorded flag, or True when the recorded TP is below the worker's chips (then
  the only reading consistent with the chip count is attention data-parallel over them: ``TP1 EP8
  DPattn=False (8 GPUs)`` runs one attention replica per GPU);
* ``<pool>_ep`` = the recorded EP (MoE tensor-parallel over the worker's chips when EP1);
* the serving framework profile is the disaggregated stack's (:mod:`jalapeno.perf.frameworks`: dynamo-sglang,
  dynamo-trt, mori-sglang, sglang-disagg): the front-end latency of the engine under it (SGLang, TensorRT-LLM)
  and the stack's fitted per-request KV handoff latency; an unknown stack falls back to its engine.

Both pools are one chip type; the KV link is the scale-up fabric when all their chips fit one scale-up domain,
else the NIC (:func:`jalapeno.sim.scenario.run_scenario`). An efficiency override (what a fit searches) applies
to both pools.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from jalapeno.errors import ConfigError


def _engine_framework(family: str) -> str | None:
    from jalapeno.errors import ConfigError as _Unknown
    from jalapeno.perf.frameworks import get_framework

    f = family.lower()
    try:
        return get_framework(f).key
    except _Unknown:
        pass
    if "sglang" in f:
        return "sglang"
    if "trt" in f:
        return "trt-llm"
    if "vllm" in f:
        return "vllm"
    return None


def pool_fields(pool: Any) -> dict[str, Any]:
    """Scenario fields (``<role>_*``) of one parsed pool (``role, workers, recorded_tp, ep, dp_attention, gpus``)."""
    r = pool.role
    chips = pool.gpus // pool.workers
    if chips % pool.ep:
        raise ConfigError(f"{r} pool: EP{pool.ep} does not divide the worker's {chips} GPUs")
    return {
        f"{r}_workers": pool.workers,
        f"{r}_chips_per_worker": chips,
        f"{r}_ep": pool.ep,
        f"{r}_dp_attention": bool(pool.dp_attention or pool.recorded_tp < chips),
    }


def recipe_decode_slots(stack: str | None, pool: Any) -> int | None:
    """Sequence slots of one decode worker of ``stack``'s recipe for the parsed decode ``pool``, from the flags
    the recipe was launched with as the layout records them (its ``DPattn`` and ``EP``: the launcher sets
    ``--max-running-requests`` from those, whatever the recorded TP; a ``TP1 EP8 DPattn=False`` worker of 8 GPUs
    is launched without dp-attention, so it gets the EP value). None: the stack's recipe publishes none."""
    from jalapeno.perf.frameworks import decode_max_running_requests

    fw = _engine_framework(stack) if stack else None
    return decode_max_running_requests(fw, pool.gpus // pool.workers, pool.ep, bool(pool.dp_attention))


def disagg_scenario(spec: Any, *, prompts_per_concurrency: int | None = None, seed: int = 0):
    """The :class:`~jalapeno.sim.scenario.Scenario` of a disaggregated :class:`SimSpec` (``spec.disagg`` set)."""
    from jalapeno.sim.scenario import Scenario

    d = spec.disagg
    if d is None:
        raise ConfigError("not a disaggregated point (its SimSpec has no pools)")
    per = prompts_per_concurrency or spec.num_prompts_per_concurrency
    kw: dict[str, Any] = {**pool_fields(d.prefill), **pool_fields(d.decode)}
    slots = recipe_decode_slots(spec.framework, d.decode)
    if slots is not None:
        kw["decode_max_num_seqs"] = slots
    if spec.spec_tokens:
        kw.update(spec_decode="mtp", spec_tokens=spec.spec_tokens,
                  acceptance=",".join(str(a) for a in spec.spec_acceptance) or "0.7")
    sc = Scenario(model=spec.model, hardware=spec.chip, precision=spec.weights, kv_dtype=spec.kv, isl=spec.isl,
                  osl=spec.osl, concurrency=spec.concurrency, num_prompts=per * spec.concurrency,
                  random_range_ratio=spec.range_ratio, framework=_engine_framework(spec.framework), seed=seed, **kw)
    if recipe_prefill_ep_only(d.prefill) and sc.pool("prefill").dp_attention and sc.framework:
        # launched EP-only (recorded ``DPattn=False``) although the cost model reads the worker's recorded TP as
        # attention-DP: the recipe's EP-only prefill value, as the launch flags say (like the decode slots)
        from jalapeno.perf.frameworks import prefill_token_ns as stack_value
        from jalapeno.sim.scenario import _stack_fitted_on

        if _stack_fitted_on(sc, sc.hardware):
            sc = replace(sc, prefill_token_ns=stack_value(sc.framework, spec.weights, ep_only=True))
    return sc


def recipe_prefill_ep_only(pool: Any) -> bool:
    """Whether a parsed prefill ``pool`` was launched with expert parallelism and without dp-attention (its
    recorded ``EPn DPattn=False``, n > 1): the recipe's EP-only prefill (``ServingFramework.prefill_ep_token_ns``)."""
    return pool.ep > 1 and not pool.dp_attention




def simulate_disagg(spec: Any, efficiency: Any = None, *, seed: int = 0, prompts_per_concurrency: int | None = None,
                    frameworks: bool = True, request_overhead_ms: float | None = None,
                    kv_handoff_ms: float | None = None, prefill_token_ns: float | None = None,
                    ttft_per_slot: int | None = None) -> dict[str, float]:
    """Predicted metrics of a disaggregated point (keys of ``points.METRICS``, SI units), with the arguments of
    :func:`jalapeno.calibration.predict.simulate`. Per-chip throughputs are per *decode* GPU, as InferenceX's
    disaggregated per-GPU numbers are (its rows: concurrency × output length / E2E ÷ per-GPU throughput = the
    decode pool's GPU count, not both pools'). ``kv_handoff_ms`` overrides the stack's handoff latency (what a
    fit searches); the stack's own value stays when only ``request_overhead_ms`` is overridden; likewise
    ``prefill_token_ns`` overrides the stack's prefill-server cost per prompt token. ``ttft_per_slot``: report as
    ``median_ttft`` the median a run of that many requests per slot would give (:func:`weighted_median_ttft`:
    the first wave weighted as in that run), not this run's plain median."""
    from dataclasses import replace

    from jalapeno.sim.scenario import run_scenario

    from jalapeno.sim.scenario import handoff_ms
    from jalapeno.sim.scenario import prefill_token_ns as stack_prefill_ns

    sc = disagg_scenario(spec, prompts_per_concurrency=prompts_per_concurrency, seed=seed)
    sc = replace(sc, kv_handoff_ms=handoff_ms(sc) if kv_handoff_ms is None else float(kv_handoff_ms),
                 prefill_token_ns=stack_prefill_ns(sc) if prefill_token_ns is None else float(prefill_token_ns))
    if not frameworks or request_overhead_ms is not None:
        sc = replace(sc, framework=None)
    if request_overhead_ms is not None:
        from jalapeno.calibration.predict import efficiency_of

        base = efficiency if efficiency is not None else efficiency_of(spec.chip)
        efficiency = base.model_copy(update={"request_overhead_ms": float(request_overhead_ms)})
    m, res = run_scenario(sc, efficiency=efficiency, return_result=True)
    from jalapeno.calibration.predict import SIM_KEYS

    out = {k: float(m[s]) * f for k, (s, f) in SIM_KEYS.items() if m.get(s) is not None}
    if ttft_per_slot:
        ok = [o for o in res.outcomes if o.success]
        out["median_ttft"] = weighted_median_ttft([o.start_s for o in ok], [o.ttft_s for o in ok],
                                                  int(spec.concurrency), int(ttft_per_slot))
    out["concurrency"] = float(spec.concurrency)
    return out


#: InferenceX's requests per concurrency slot (its closed-loop benchmark sends 10 × concurrency prompts)
INFERENCEX_PER_SLOT = 10


def weighted_median_ttft(start_s: Any, ttft_s: Any, concurrency: int, per_slot: int = INFERENCEX_PER_SLOT) -> float:
    """The median TTFT a closed-loop run of ``per_slot`` requests per slot would report, estimated from a shorter
    run: its first wave (the ``concurrency`` requests sent first, all at t = 0, queueing behind the prefill pool)
    carries weight ``1 / per_slot`` and the later requests (the steady state) the rest, as they would in the
    longer run; the weighted median of the TTFTs (the smallest TTFT whose cumulative weight reaches half). With
    exactly ``per_slot`` requests per slot it is the plain median of the run (up to the even-count midpoint)."""
    start, ttft = np.asarray(start_s, dtype=float), np.asarray(ttft_s, dtype=float)
    if start.shape != ttft.shape or not ttft.size:
        raise ConfigError("weighted_median_ttft: needs one start time per TTFT and at least one request")
    if concurrency < 1 or per_slot < 1:
        raise ConfigError(f"weighted_median_ttft: concurrency and per_slot must be >= 1 (got {concurrency}, {per_slot})")
    order = np.argsort(start, kind="stable")
    first = np.zeros(ttft.size, dtype=bool)
    first[order[:concurrency]] = True
    n_first, n_rest = int(first.sum()), int((~first).sum())
    if n_rest == 0:
        return float(np.median(ttft))
    w = np.where(first, 1.0 / per_slot / n_first, (1.0 - 1.0 / per_slot) / n_rest)
    idx = np.argsort(ttft, kind="stable")
    cum = np.cumsum(w[idx])
    return float(ttft[idx][np.searchsorted(cum, 0.5 * cum[-1] - 1e-12)])


def disagg_items(points: Any) -> list:
    """(point, :class:`SimSpec`) of every disaggregated point of ``points`` that maps to a simulation."""
    from jalapeno.calibration.points import Excluded, to_sim_spec

    out = []
    for p in points:
        if "disagg=True" not in p.col("notes"):
            continue
        s = to_sim_spec(p)
        if not isinstance(s, Excluded) and s.disagg is not None:
            out.append((p, s))
    return out


def fit_handoff(items: list, held: list, *, max_concurrency: int = 64, workers: int = 2, prompts: int = 2,
                max_nfev: int = 6, progress: Any = None) -> dict[str, Any]:
    """Fit each disaggregated stack's ``kv_handoff_ms`` (:mod:`jalapeno.perf.frameworks`) on median TTFT of
    ``items`` (the fit split, deduplicated), one chip at a time with :func:`jalapeno.calibration.fit.fit`; only
    points at concurrency <= ``max_concurrency`` are used (and tabled, with ``held``), where TTFT is the
    request's own path and not queueing behind a saturated pool. Returns ``{chip: FitReport.to_json()}``."""
    from jalapeno.calibration.fit import POINTS_PER_PARAM, fit

    def low(its: list) -> list:
        return [it for it in its if (it[1].concurrency or 0) <= max_concurrency]

    out: dict[str, Any] = {}
    for chip in sorted({s.chip for _, s in items}):
        mine = [it for it in low(items) if it[1].chip == chip]
        stacks = sorted({s.framework for _, s in mine
                         if sum(1 for _, t in mine if t.framework == s.framework) >= POINTS_PER_PARAM})
        if not stacks:
            continue
        rep = fit(mine, [it for it in low(held) if it[1].chip == chip], chip,
                  [f"kv_handoff_ms@{f}" for f in stacks], workers=workers, search_prompts=prompts,
                  final_prompts=prompts, handoff_nfev=max_nfev, progress=progress)
        out[chip] = rep.to_json()
    return out


#: the sim's default prefill token budget per step (``--max-num-batched-tokens``): a full prefill step
FULL_STEP_TOKENS = 8192


def prefill_step_tokens(sc: Any) -> int:
    """Prompt tokens in one full prefill step of the scenario's prefill pool: its stack's ``max_prefill_tokens``
    (SGLang: 16384; :func:`jalapeno.sim.scenario.prefill_limits`), else :data:`FULL_STEP_TOKENS`."""
    from jalapeno.sim.factory import SimLimits
    from jalapeno.sim.scenario import prefill_limits

    pol = prefill_limits(sc, SimLimits(max_num_batched_tokens=FULL_STEP_TOKENS)).scheduling
    return int(pol.max_prefill_tokens if pol is not None and pol.separate_prefill and pol.max_prefill_tokens
               else FULL_STEP_TOKENS)


@dataclass(frozen=True)
class PrefillRate:
    """One measured disaggregated point's prefill throughput against the cost model's price.

    ``measured_tok_s``: prompt tokens per second one prefill worker sustained (Little's law on the closed loop:
    requests/s = concurrency / (TTFT + (mean output - 1) × TPOT), times the mean prompt, over the workers);
    ``model_s_per_tok``: the cost model's seconds per prompt token of a full prefill step on one worker;
    ``saturated``: the prefill pool was the bottleneck (see :func:`prefill_rate`)."""

    label: str
    stack: str
    measured_tok_s: float
    model_s_per_tok: float
    saturated: bool

    @property
    def implied_ns(self) -> float:
        """The per-prompt-token time the measurement adds to the cost model's price (ns; may be negative)."""
        return (1.0 / self.measured_tok_s - self.model_s_per_tok) * 1e9


def prefill_rate(p: Any, s: Any, *, min_ttft_s: float = 1.0, min_waiting: float = 0.25,
                 min_isl_over_osl: float = 2.0) -> PrefillRate:
    """:class:`PrefillRate` of point ``p`` (its :class:`SimSpec` ``s``). Saturated when the median TTFT is at
    least ``min_ttft_s``, at least ``min_waiting`` of the closed loop's requests wait for their first token
    (requests/s × TTFT ≥ that share of the concurrency) and the prompts are at least ``min_isl_over_osl`` times
    the outputs (a prefill-heavy shape: the decode pool then holds few requests, so the wait is the prefill
    pool's, not a decode slot limit's)."""
    from jalapeno.models import load_model
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.scenario import _cost_model

    m, c = p.metrics, int(s.concurrency or 0)
    isl = s.isl * (1 + s.range_ratio) / 2
    osl = s.osl * (1 + s.range_ratio) / 2
    ttft, tpot = m["median_ttft"], m["median_tpot"]
    rate = c / (ttft + (osl - 1) * tpot)
    sc = disagg_scenario(s)
    q = sc.pool("prefill")
    cm = _cost_model(sc, load_model(sc.model), q.hardware, q.tp, q.ep, q.dp_attention, pp=q.pp,
                     precision=q.precision)
    k = max(1, int(prefill_step_tokens(sc) // isl))
    per_tok = cm.step(StepShape.from_lists([(int(round(isl)), 0)] * k)).time_s / (k * round(isl))
    sat = ttft >= min_ttft_s and rate * ttft >= min_waiting * c and s.isl >= min_isl_over_osl * s.osl
    return PrefillRate(p.label, s.framework, rate * isl / q.workers, per_tok, bool(sat))


def fit_prefill_token_ns(items: list) -> dict[str, dict[str, Any]]:
    """Each disaggregated stack's ``prefill_token_ns`` per prefill weight precision from ``items`` (the fit
    split), keyed ``"<stack>@<weights>"``: the median :attr:`PrefillRate.implied_ns` over its saturated points,
    floored at 0. A precision with fewer than ``fit.POINTS_PER_PARAM`` saturated points takes the median over all
    its stack's saturated points (``"pooled": True``) when those are enough; a precision without any saturated
    point, or a stack with too few, gets none (``prefill_token_ns`` None: refused, not a one-point fit).

    The saturated points whose prefill worker was launched EP-only (:func:`recipe_prefill_ep_only`) also give
    ``prefill_ep_token_ns``, keyed ``"<stack>@<weights>/ep-only"``: their median; with fewer than
    ``POINTS_PER_PARAM`` of the stack's own, the median over the EP-only points of that precision of every stack
    on its chip (``"pooled": "<chip>"``: the stacks that share a launcher); still fewer: None."""
    from jalapeno.calibration.fit import POINTS_PER_PARAM

    by: dict[tuple[str, str], list[PrefillRate]] = {}
    ep: dict[tuple[str, str, str], list[PrefillRate]] = {}
    for p, s in items:
        if "median_ttft" in p.metrics and "median_tpot" in p.metrics and s.concurrency:
            r = prefill_rate(p, s)
            if r.saturated:
                by.setdefault((r.stack, s.weights), []).append(r)
                if s.disagg is not None and recipe_prefill_ep_only(s.disagg.prefill):
                    ep.setdefault((s.chip, r.stack, s.weights), []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for (st, w), rs in sorted(by.items()):
        pooled = len(rs) < POINTS_PER_PARAM
        use = [r for (t, _), rr in by.items() if t == st for r in rr] if pooled else rs
        out[f"{st}@{w}"] = _median_entry("prefill_token_ns", rs, use, pooled)
    for (chip, st, w), rs in sorted(ep.items()):
        pooled = chip if len(rs) < POINTS_PER_PARAM else False
        use = [r for (c, _, v), rr in ep.items() if c == chip and v == w for r in rr] if pooled else rs
        out[f"{st}@{w}/ep-only"] = _median_entry("prefill_ep_token_ns", rs, use, pooled)
    return out


def _median_entry(name: str, own: list[PrefillRate], use: list[PrefillRate], pooled: Any) -> dict[str, Any]:
    """One fitted value: the median implied ns of ``use`` (floored at 0; None below ``POINTS_PER_PARAM``)."""
    from jalapeno.calibration.fit import POINTS_PER_PARAM

    ok = len(use) >= POINTS_PER_PARAM
    return {name: max(0.0, float(np.median([r.implied_ns for r in use]))) if ok else None,
            "points": len(own), "pooled": pooled, "implied_ns": sorted(round(r.implied_ns, 1) for r in use)}


@dataclass(frozen=True)
class PrefillLoad:
    """One measured closed-loop disaggregated point's prefill side by Little's law, against the cost model's
    prefill price (the stack's per-token terms included) and, when given, a simulation of it.

    ``rate``: measured requests/s (output tok/s per decode GPU × decode GPUs / mean output); ``one_s``: one mean
    prompt alone on a prefill worker; ``batch_s``: per prompt in a full prefill batch; ``rho_one`` / ``rho_batch``:
    the utilisation the measured rate implies at those prices over the ``workers``; ``in_prefill``: requests in the
    prefill side per worker (rate × (TTFT − front end − KV handoff and wire) / workers); ``sim_rate`` / ``sim_rho``:
    the simulation's request rate and its prefill utilisation at ``batch_s`` (None without a simulation)."""

    rate: float
    one_s: float
    batch_s: float
    workers: int
    in_prefill: float
    sim_rate: float | None = None

    @property
    def rho_one(self) -> float:
        return self.rate * self.one_s / self.workers

    @property
    def rho_batch(self) -> float:
        return self.rate * self.batch_s / self.workers

    @property
    def sim_rho(self) -> float | None:
        return self.sim_rate * self.batch_s / self.workers if self.sim_rate is not None else None


def prefill_load(p: Any, s: Any, sim_tput_per_gpu: float | None = None) -> PrefillLoad:
    """:class:`PrefillLoad` of measured point ``p`` (``s`` its SimSpec; needs median TTFT and output tok/s per GPU);
    ``sim_tput_per_gpu``: the simulated output tok/s per decode GPU of the same point, for its request rate."""
    from jalapeno.models import load_model
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim import scenario as S

    d, m = s.disagg, p.metrics
    if d is None or not s.concurrency:
        raise ConfigError(f"{p.label}: not a closed-loop disaggregated point")
    sc = disagg_scenario(s)
    arch = load_model(sc.model)
    qp, qd = sc.pool("prefill"), sc.pool("decode")
    cm = S._prefill_pool_model(sc, arch, qp)
    isl, osl = s.isl * (1 + s.range_ratio) / 2, s.osl * (1 + s.range_ratio) / 2
    one = cm.step(StepShape.from_lists([(int(isl), 0)])).time_s
    k = max(1, int(prefill_step_tokens(sc) // isl))
    batch = cm.step(StepShape.from_lists([(int(isl), 0)] * k)).time_s / k
    link = S._kv_link(cm, S._decode_pool_model(sc, arch, qd), qp.workers, qd.workers, S.handoff_ms(sc) * 1e-3)
    fixed = cm.eff.request_overhead_ms * 1e-3 + link.transfer_s(int(isl))
    rate = m["output_tput_per_gpu"] * d.decode.gpus / osl
    sim = sim_tput_per_gpu * d.decode.gpus / osl if sim_tput_per_gpu else None
    return PrefillLoad(rate, one, batch, qp.workers, rate * max(m["median_ttft"] - fixed, 0.0) / qp.workers, sim)


@dataclass(frozen=True)
class DecodeOccupancy:
    """Where a measured closed-loop disaggregated point's requests are, by Little's law on its medians:
    ``decoding`` = request rate × (mean output − 1) × TPOT, ``waiting`` = request rate × TTFT (the request rate =
    output tok/s per decode GPU × decode GPUs / mean output; ``decoding + waiting`` ≈ the concurrency), against the
    decode pool's recipe slots (``slots`` per worker × ``workers``; ``slots`` None where none is published)."""

    concurrency: int
    decoding: float
    waiting: float
    workers: int
    slots: int | None

    @property
    def slot_share(self) -> float | None:
        """The share of the decode pool's recipe slots in use (None without published slots)."""
        return self.decoding / (self.workers * self.slots) if self.slots else None


def decode_occupancy(p: Any, s: Any) -> DecodeOccupancy:
    """:class:`DecodeOccupancy` of measured point ``p`` (``s`` its SimSpec; needs its median TTFT, TPOT and output
    tok/s per GPU)."""
    m = p.metrics
    osl = s.osl * (1 + s.range_ratio) / 2
    d = s.disagg
    if d is None or not s.concurrency:
        raise ConfigError(f"{p.label}: not a closed-loop disaggregated point")
    rate = m["output_tput_per_gpu"] * d.decode.gpus / osl
    return DecodeOccupancy(int(s.concurrency), rate * (osl - 1) * m["median_tpot"], rate * m["median_ttft"],
                           d.decode.workers, recipe_decode_slots(s.framework, d.decode))


@dataclass(frozen=True)
class DecodeStep:
    """One measured non-speculative point with a dp-attention + EP decode pool: its median TPOT against the
    cost model's decode step at the batch it ran (Little's law: requests/s × (mean output - 1) × TPOT requests
    in decode, over the decode workers; each at the mean prompt + half the mean output of context)."""

    label: str
    stack: str
    measured_s: float
    model_s: float
    moe_layers: int

    @property
    def implied_us(self) -> float:
        """Per MoE layer, the time the measurement adds to the modelled step (us; may be negative)."""
        return (self.measured_s - self.model_s) / self.moe_layers * 1e6


def decode_step(p: Any, s: Any) -> DecodeStep | None:
    """:class:`DecodeStep` of point ``p`` (``s`` its SimSpec); None unless its decode pool runs dp-attention
    with EP > 1 and it is not speculative (an MTP step's tokens per step depend on an unpublished acceptance)."""
    from jalapeno.models import load_model
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.scenario import _cost_model

    sc = disagg_scenario(s)
    q = sc.pool("decode")
    if s.spec_tokens or not (q.dp_attention and q.ep > 1) or not s.concurrency:
        return None
    m = p.metrics
    isl = s.isl * (1 + s.range_ratio) / 2
    osl = s.osl * (1 + s.range_ratio) / 2
    ttft, tpot = m["median_ttft"], m["median_tpot"]
    rate = s.concurrency / (ttft + (osl - 1) * tpot)
    batch = max(1, round(rate * (osl - 1) * tpot / q.workers))
    arch = load_model(sc.model)
    cm = _cost_model(sc, arch, q.hardware, q.tp, q.ep, q.dp_attention, pp=q.pp, precision=q.precision)
    t = cm.step(StepShape.from_lists(decode_ctx=[int(isl + osl / 2)] * batch)).time_s
    return DecodeStep(p.label, s.framework, tpot, t, sum(1 for i in range(arch.num_layers) if arch.is_moe_layer(i)))


@dataclass(frozen=True)
class DecodeGap:
    """One measured non-speculative disaggregated point's median TPOT against the cost model's decode step of its
    decode pool (the stack's per-pool terms included) at the batch one decode worker ran by Little's law
    (requests/s × (mean output − 1) × TPOT requests in decode, over the decode workers; each at the mean prompt +
    half the mean output of context); ``batch`` that batch, ``per_worker`` the decode pool's layout."""

    label: str
    chip: str
    stack: str
    layout: str
    concurrency: int
    batch: int
    measured_s: float
    model_s: float

    @property
    def gap_ms(self) -> float:
        """Measured TPOT minus the modelled step (ms; positive: the simulator prices the step too fast)."""
        return (self.measured_s - self.model_s) * 1e3


def decode_gap(p: Any, s: Any) -> DecodeGap | None:
    """:class:`DecodeGap` of point ``p`` (``s`` its SimSpec); None for a speculative point (its tokens per step
    depend on an unpublished acceptance) or one without median TTFT / TPOT."""
    from jalapeno.models import load_model
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.scenario import _decode_pool_model

    m = p.metrics
    if s.spec_tokens or not s.concurrency or "median_tpot" not in m or "median_ttft" not in m:
        return None
    sc = disagg_scenario(s)
    q = sc.pool("decode")
    isl = s.isl * (1 + s.range_ratio) / 2
    osl = s.osl * (1 + s.range_ratio) / 2
    rate = s.concurrency / (m["median_ttft"] + (osl - 1) * m["median_tpot"])
    batch = max(1, round(rate * (osl - 1) * m["median_tpot"] / q.workers))
    cm = _decode_pool_model(sc, load_model(sc.model), q)
    t = cm.step(StepShape.from_lists(decode_ctx=[int(isl + osl / 2)] * batch)).time_s
    lay = f"TP{q.tp} EP{q.ep}{' dp-attention' if q.dp_attention else ''} x{q.workers}"
    return DecodeGap(p.label, s.chip, s.framework, lay, int(s.concurrency), batch, m["median_tpot"], t)


def fit_dpa_decode_moe_layer_us(items: list) -> dict[str, dict[str, Any]]:
    """Each disaggregated stack's ``dpa_decode_moe_layer_us`` from ``items`` (the fit split): the median
    :attr:`DecodeStep.implied_us` over its points with a dp-attention + EP decode pool (no MTP), floored at 0.
    A stack with fewer than ``fit.POINTS_PER_PARAM`` such points takes the median over all the stacks on its
    chip (``"pooled": "<chip>"``: the all-to-all kernels are the chip's EP library's); still fewer: None
    (refused)."""
    from jalapeno.calibration.fit import POINTS_PER_PARAM

    by: dict[str, list[DecodeStep]] = {}
    chip_of: dict[str, str] = {}
    for p, s in items:
        if "median_ttft" in p.metrics and "median_tpot" in p.metrics:
            d = decode_step(p, s)
            if d is not None:
                by.setdefault(d.stack, []).append(d)
                chip_of[d.stack] = s.chip
    out: dict[str, dict[str, Any]] = {}
    for st, ds in sorted(by.items()):
        use, pooled = ds, None
        if len(ds) < POINTS_PER_PARAM:
            pooled = chip_of[st]
            use = [d for t, dd in by.items() if chip_of[t] == pooled for d in dd]
        ok = len(use) >= POINTS_PER_PARAM
        out[st] = {"dpa_decode_moe_layer_us": max(0.0, float(np.median([d.implied_us for d in use]))) if ok else None,
                   "points": len(ds), "pooled": pooled, "implied_us": sorted(round(d.implied_us, 1) for d in use)}
    return out


__all__ = ["DecodeGap", "decode_gap", "PrefillLoad", "prefill_load", "DecodeOccupancy", "decode_occupancy", "DecodeStep", "decode_step", "fit_dpa_decode_moe_layer_us", "FULL_STEP_TOKENS", "PrefillRate",
           "prefill_step_tokens", "recipe_prefill_ep_only", "disagg_items", "disagg_scenario", "fit_handoff",
           "fit_prefill_token_ns", "pool_fields", "prefill_rate", "recipe_decode_slots", "simulate_disagg", "INFERENCEX_PER_SLOT",
           "weighted_median_ttft"]
