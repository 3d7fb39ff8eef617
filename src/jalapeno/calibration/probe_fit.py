"""The probe's small-M terms, fitted on what ``jalapeno hardware probe`` measured (here, above the cost model: the
hardware package cannot import it; ``jalapeno calibrate --probe local.yaml`` applies the fit to a probe YAML) (docs/cost-model.md, "Small-M GEMMs"): a GEMM efficiency table by rows that follows
the path the engine takes, measured on the engine's own kernel.

The roofline prices a decode step below the ridge at its weight read alone, whatever the batch; on the 2-core VMs
the probe's fused decode steps grow with the batch (7.5 -> 15.5 ms from batch 1 to 16 on the engine's path on one,
3.9 -> 11.8 ms on another) because the kernel's compute does not hide under its weight stream, and its GEMM rate
depends on how many rows it multiplies and with which tiles (batch 1 a matrix-vector pass, a few rows dot-product
tiles, from the panel switch outer-product panels). Pure functions of a :class:`~jalapeno.hardware.probe.ProbeResult`:
the cost model prices each measured step (:meth:`CostModel.op_times`, compute and memory adding), the fit takes the
memory fraction from the batch-1 steps, the kernel's GEMM rate at each measured batch from that batch's step, and
the compute fraction from the prefill steps, alternately until they settle. :func:`probe_from_chip` rebuilds the
measurements from a probe YAML's notes, to refit without probing again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from jalapeno.hardware.probe import ProbeResult
    from jalapeno.hardware.schema import ChipSpec

#: the decode batches the overlap is fitted on: the closed loop's (issue 16's grid runs up to concurrency 32)
FIT_MAX_BATCH = 32


@dataclass(frozen=True)
class SmallMFit:
    """The fitted fractions and how well they price the probe's steps."""

    compute_default: float
    memory_default: float
    overlap: float
    compute_by_rows: dict[int, float]
    measured_s: dict[int, float]  # decode batch -> the step the engine's path took (less its layer overhead)
    priced_s: dict[int, float]  # the same steps as the fit prices them
    worst_error: float  # largest |priced / measured - 1| over the fitted batches
    #: what the fp32 matmul peak is multiplied by: the fit's compute fraction over 1 when the prefill steps ran
    #: faster than the microbenchmark's "peak" (then ``compute_default`` is 1 and the peak is what they reached)
    peak_scale: float = 1.0
    #: prefill tokens -> (measured, priced) seconds of the probe's prefill steps (less the layers' overhead)
    prefill_s: dict[int, tuple[float, float]] = field(default_factory=dict)
    #: the served-shape model's steps the fit also priced (a joint fit over both models): label -> (measured, priced)
    #: seconds, each less its layers' overhead; empty when the probe did not time that model
    served_s: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: ``efficiency.prefill_attention_compute``: the fraction of the peak at which a prefill's causal attention pairs
    #: ran, fitted beside ``compute_default`` where the prefill lengths tell them apart (None: at compute_default)
    prefill_attention: float | None = None


def pytorch_rate_at(rows_tflops: Mapping[int, float], rows: int) -> float | None:
    """PyTorch's GEMM TFLOPS at ``rows`` rows from the probe's by-rows measurements: measured, or log2-linear between
    the measured row counts around it; None unless some are measured at or below and above ``rows``."""
    from jalapeno.perf.model import rows_efficiency

    if not any(m <= rows for m in rows_tflops) or not any(m > rows for m in rows_tflops):
        return None
    return float(rows_efficiency(dict(rows_tflops), np.array([float(rows)]))[0])


def rows_table(res: ProbeResult, compute_default: float, cap: int, scale: float = 1.0, *,
               ceiling: float = 1.0) -> dict[int, float] | None:
    """``compute_by_rows`` by the path the engine takes at each row count of ROWS_TABLE: up to the fused kernel's
    crossover ``cap``, the kernel, at ``compute_default`` (its per-row cost where the probe's decode steps are
    compute-bound, 16-32 rows, is at or above the fp32 matmul peak: its GEMMs are not small-M-starved; what makes
    its steps grow with the batch is compute that does not hide under the weight stream, the overlap); above it,
    PyTorch's GEMM at ROWS_KN, each row count's TFLOPS over the largest's times ``compute_default`` (the fraction a
    real prefill step reached: the table meets it at the prefill's rows), from ``cap + 1`` rows on (that entry:
    PyTorch's rate at ``cap`` rows, measured or interpolated, so the table steps at the switch of path instead of
    interpolating from the kernel's rate). None when the PyTorch rows were not
    measured. ``compute_default`` is relative to the matmul microbenchmark's peak and may exceed 1 (real prefill
    steps beat it); the kernel's rows never do (its GEMMs reach the microbenchmark's rate, not the prefill's), and
    every entry is then divided by ``scale``, what the peak is raised by. Entries are capped at ``ceiling`` (the fit
    lifts it while the fraction may exceed 1)."""
    from jalapeno.hardware.probe import ROWS_TABLE

    if len(res.rows_tflops) < 2:
        return None
    top = res.rows_tflops[max(res.rows_tflops)]
    out = {m: min(compute_default, 1.0) / scale for m in ROWS_TABLE if m <= cap}
    out.update({m: compute_default * v / top / scale for m, v in res.rows_tflops.items() if m > cap})
    at_cap = pytorch_rate_at(res.rows_tflops, cap)
    if at_cap is not None:
        # one row past the crossover the step runs PyTorch at (about) its rate at the crossover's rows, not the
        # kernel's: without this entry the table would interpolate from the kernel's rate up to PyTorch's next
        # measured row count (128 -> 512), pricing the PyTorch path's 129-511-row steps (mixed steps, short
        # prefills beside decode rows) at up to the kernel's rate (issue 16, seventeenth session)
        out[cap + 1] = compute_default * at_cap / top / scale
    return {m: round(min(ceiling, v), 5) for m, v in sorted(out.items())}


def engine_decode_steps(res: ProbeResult, cap: int) -> dict[int, float]:
    """Seconds of the probe's decode steps on the path the engine takes at each batch (the fused kernel, panel or
    dot-tile GEMMs whichever was faster, up to the crossover ``cap``; PyTorch above), batches <= FIT_MAX_BATCH."""
    out = {}
    for b, fused in sorted(res.fused_step_s.items()):
        if b > FIT_MAX_BATCH:
            continue
        out[b] = min(fused, res.dot_step_s.get(b, fused)) if b <= cap else res.torch_step_s.get(b, fused)
    return out


def _priced(tc: np.ndarray, tm: np.ndarray, f: np.ndarray, overlap: np.ndarray) -> np.ndarray:
    """Step time per (memory fraction, overlap) candidate: sum over operators of max(c, m / f) + (1 - overlap) x
    min(c, m / f) (``tc``, ``tm``: the operators' compute and memory times at memory fraction 1)."""
    m = tm[None, :] / f[:, None]
    ov = overlap[:, None]
    return (np.maximum(tc, m) + (1.0 - ov) * np.minimum(tc, m)).sum(axis=1)


def _price_step(cm: Any, shape: Any, f: float, ov: float) -> float:
    """One step's time on cost model ``cm`` at memory fraction ``f`` and overlap ``ov`` (:func:`_priced`)."""
    tc, tm, _ = cm.op_times(shape)
    return float(_priced(tc, tm, np.array([f]), np.array([ov]))[0])


def probe_prefill_steps(res: ProbeResult) -> dict[int, float]:
    """The probe's prefill steps by prompt tokens (seconds, less the crossover model's per-layer overhead): every
    measured length, or the one PREFILL_TOKENS step of an older probe."""
    from jalapeno.hardware import probe as pr

    steps = {t: s for t, (_, s) in res.prefill_s.items()}
    if not steps and res.prefill_step_s:
        steps = {pr.PREFILL_TOKENS: res.prefill_step_s}
    return {t: pr._net_of_layer_overhead(res, s) for t, s in sorted(steps.items())}


@dataclass(frozen=True)
class _Served:
    """The served-shape model's steps a joint fit prices beside the crossover model's: its decode steps at the
    shortest measured context by batch and its prefill steps by tokens (seconds, less its layers' overhead)."""

    arch: Any
    ctx: int
    decode: dict[int, float]
    prefill: dict[int, float]


def _served_steps(res: ProbeResult) -> _Served | None:
    """The served model's steps for the joint fit (its decode steps by batch at the shortest context, the small
    batches included), or None when the probe did not time them."""
    from jalapeno.hardware import probe as pr
    from jalapeno.models.catalog import load_model

    if not (res.served_model and res.served_ctx_step_s):
        return None
    fixed = res.served_layers * (res.layer_overhead_us or 0.0) * 1e-6
    net = lambda t: t - fixed if t - fixed > 0.25 * t else t  # noqa: E731
    ctx = min(c for by in res.served_ctx_step_s.values() for c in by)
    decode = {b: net(by[ctx]) for b, by in res.served_ctx_step_s.items() if ctx in by}
    if ctx == pr.LONG_CONTEXTS[0]:  # the small batches, timed at the shortest context (SERVED_SMALL_BATCHES)
        decode.update({b: net(t) for b, t in res.served_small_step_s.items() if b not in decode})
    decode = dict(sorted(decode.items()))
    prefill = {t: net(v) for t, v in sorted(res.served_prefill_s.items())}
    return _Served(load_model(res.served_model), ctx, decode, prefill)


def kernel_decode_steps(res: ProbeResult, cap: int) -> dict[int, float]:
    """Seconds of the probe's decode steps on the fused kernel (panel or dot-tile GEMMs, whichever was faster: the
    path the engine takes) at every measured batch up to its crossover ``cap``."""
    return {b: min(t, res.dot_step_s.get(b, t)) for b, t in sorted(res.fused_step_s.items()) if b <= cap}


def split_parts(arch: Any, chip: ChipSpec, eff: Any, shapes: Mapping[Any, Any]) -> dict[Any, tuple[float, float, float]]:
    """Per step shape: (its weight GEMMs' compute seconds at the matmul microbenchmark's peak, its other operators'
    compute seconds, its memory seconds at the full read bandwidth), on ``chip`` with efficiency ``eff`` (its
    ``memory_default`` should be 1). The GEMMs are told apart by pricing each step at two uniform rows tables (every
    GEMM's compute time doubles at half the rate; nothing else moves)."""
    from jalapeno.sim.factory import cost_model_for

    models = [cost_model_for(arch, chip, precision="fp32", kv="fp32", efficiency=eff.model_copy(update={
        "compute_by_rows": {1: rate}, "memory_default": 1.0, "compute_memory_overlap": None})) for rate in (1.0, 0.5)]
    out = {}
    for key, shape in shapes.items():
        (tc1, tm, _), (tc2, _, _) = (cm.op_times(shape) for cm in models)
        gemm = float((tc2 - tc1).sum())
        out[key] = (gemm, float(tc1.sum()) - gemm, float(tm.sum()))
    return out


def memory_fraction(parts: list[tuple[float, float, float]], seconds: list[float], rate: float) -> float:
    """The fraction of the read bandwidth at which the batch-1 decode steps (``parts`` as :func:`split_parts`
    gives them, ``seconds`` measured) stream their weights, their GEMMs at ``rate`` of the peak and compute and
    memory adding: each step's own fraction, capped at 1, and their geometric mean (each model weighing alike)."""
    fs = []
    for (gemm, other, mem), t in zip(parts, seconds):
        rest = t - gemm / rate - other
        fs.append(min(1.0, mem / rest) if rest > 0 else 1.0)
    return float(np.exp(np.mean(np.log(fs))))


def kernel_rate(part: tuple[float, float, float], seconds: float, memory: float, ceiling: float = 1.0) -> float:
    """The fraction of the matmul peak at which a decode step's weight GEMMs ran (``part`` as :func:`split_parts`
    gives it, ``seconds`` measured), its weights streamed at ``memory`` of the read bandwidth and compute and
    memory adding; ``ceiling`` when the step took no longer than its memory and other compute (floor 1e-3)."""
    gemm, other, mem = part
    rest = seconds - mem / memory - other
    return ceiling if rest <= gemm / ceiling else max(gemm / rest, 1e-3)


def fit_small_m(res: ProbeResult, chip: ChipSpec, cap: int, rounds: int = 8) -> SmallMFit | None:
    """Fit the small-M terms on the probe's decode steps by batch and its prefill steps (each less the crossover
    model's per-layer overhead), pricing them with the cost model on ``chip`` (its overheads set aside: the probe
    times the runner alone). Compute and memory add (overlap 0: on a CPU the same cores issue the loads and the
    FMAs). The memory fraction is the one at which the batch-1 steps (of the crossover model and, when timed, the
    served model: each weighing alike) stream their weights, their GEMMs at the compute fraction; then the fused
    kernel's GEMM rate at each measured batch up to the crossover ``cap`` is what reproduces that batch's step:
    the served model's batches where it was timed (1, 8, 16 and the small batches 2, 4 at the shortest context:
    batch 1's matrix-vector pass and batch 8 do not bracket the dot tiles' rate at 2-7 rows), the crossover model's
    above the largest of them (every crossover batch when the served model was not timed; between measured batches
    the table interpolates): its
    dot-product tiles and panel GEMMs run at their own rates, which no one peak fraction gives. Taken from the
    crossover model at every batch, the rates followed that model's step-to-step noise (issue 16, twenty-first
    session). Above ``cap``, PyTorch's GEMM by
    rows (:func:`rows_table`). The compute fraction and the prefill's causal attention fraction
    (``prefill_attention_compute``) are the two that best reproduce the prefill lengths above ``cap`` (all of them
    when none is; :func:`_fit_prefill_fractions`: the attention's share grows with the prompt, so 512 and 2048 tokens
    tell them apart; one fraction for both when the lengths cannot), alternately with the rest until they settle;
    above 1 (the steps beat the microbenchmark's peak) it becomes ``peak_scale`` and the fraction 1. None when the
    probe has no rows table, no kernel steps at two batches, or no batch-1 step."""
    from jalapeno.hardware import probe as pr
    from jalapeno.models.hf_config import arch_from_config
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    kernel = kernel_decode_steps(res, cap)
    steps = engine_decode_steps(res, cap)
    if 1 not in kernel or len(kernel) < 2 or not res.decode_layers or rows_table(res, 1.0, cap) is None:
        return None
    arch = arch_from_config(pr.llama_config(res.decode_layers, *pr.CROSSOVER_MODEL), "probe-crossover-llama")
    net = lambda t: pr._net_of_layer_overhead(res, t)  # noqa: E731
    measured = {b: net(t) for b, t in steps.items()}
    kmeasured = {b: net(t) for b, t in kernel.items()}
    prefill = probe_prefill_steps(res)
    served = _served_steps(res)
    sdecode = {b: t for b, t in (served.decode if served else {}).items() if b <= cap}
    zero = {k: 0.0 for k in ("step_overhead_us", "layer_overhead_us", "seq_overhead_us")}
    base = chip.efficiency.model_copy(update=zero)
    shape = lambda ctx, b: StepShape.from_lists(decode_ctx=[ctx] * b)  # noqa: E731
    px = split_parts(arch, chip, base, {b: shape(pr.CROSSOVER_CTX, b) for b in kmeasured})
    ps = split_parts(served.arch, chip, base, {b: shape(served.ctx, b) for b in sdecode}) if served else {}
    cd = chip.efficiency.compute_default
    pick = [t for t in prefill if t > cap] or list(prefill)
    spick = [t for t in (served.prefill if served else {}) if t > cap] or list(served.prefill if served else {})
    top = max(sdecode, default=0)  # each batch's step: the served model's, the crossover model's above its batches
    rated = {**{b: (px[b], t) for b, t in kmeasured.items() if b > top}, **{b: (ps[b], t) for b, t in sdecode.items()}}
    f, kern = 1.0, {}
    pa: float | None = None  # the prefill attention's own fraction, once two prefill lengths tell it apart
    for _ in range(rounds):
        e1 = min(cd, 1.0)
        ones = [(px[1], kmeasured[1])] + ([(ps[1], sdecode[1])] if 1 in sdecode else [])
        f = memory_fraction([p for p, _ in ones], [t for _, t in ones], e1)
        kern = {1: e1, **{b: kernel_rate(p, t, f) for b, (p, t) in sorted(rated.items()) if b != 1}}
        if not prefill:
            break
        # compute scales as 1 / cd where the GEMMs follow it (PyTorch's, above the crossover; the memory share of a
        # prefill is small), the causal attention's pairs as 1 / pa: both from the prefill lengths above the
        # crossover, the served model's too, each model weighing alike
        sets = [(arch, {t: prefill[t] for t in pick})]
        if served is not None and served.prefill:
            sets.append((served.arch, {t: served.prefill[t] for t in spick}))
        cd, pa = _fit_prefill_fractions(sets, chip, base, res, kern, cd, pa, cap, f)
    scale = max(1.0, cd)
    table = {**{m: round(min(1.0, v / scale), 5) for m, v in kern.items()},
             **{m: v for m, v in (rows_table(res, cd, cap, scale) or {}).items() if m > cap}}
    pa_out = None if pa is None else round(min(1.0, pa / scale), 5)
    eff = base.model_copy(update={"compute_default": cd, "memory_default": 1.0, "compute_by_rows":
                                  {m: v * scale for m, v in table.items()}, "compute_memory_overlap": None,
                                  "prefill_attention_compute": None if pa_out is None else pa_out * scale})
    cm = cost_model_for(arch, chip, precision="fp32", kv="fp32", efficiency=eff)
    priced = {b: _price_step(cm, shape(pr.CROSSOVER_CTX, b), f, 0.0) for b in measured}
    worst = max(abs(priced[b] / t - 1) for b, t in measured.items())
    pre, spre = {}, {}
    for t, s in prefill.items():  # the prefill steps as the fitted fractions price them (beside what they took)
        pre[t] = (s, _price_step(cm, StepShape.from_lists(prefill=[(t, 0)]), f, 0.0))
    if served is not None:  # the served model's steps as the fit prices them
        scm = cost_model_for(served.arch, chip, precision="fp32", kv="fp32", efficiency=eff)
        shapes = {**{f"decode b{b} @{served.ctx}": (shape(served.ctx, b), t) for b, t in served.decode.items()},
                  **{f"prefill {t}": (StepShape.from_lists(prefill=[(t, 0)]), v) for t, v in served.prefill.items()}}
        for label, (sh, t) in shapes.items():
            spre[label] = (t, _price_step(scm, sh, f, 0.0))
    return SmallMFit(round(cd / scale, 4), round(f, 4), 0.0, table, measured, priced,
                     worst if math.isfinite(worst) else 1.0, round(scale, 4), pre, spre, pa_out)


def _prefill_eff(base: Any, res: ProbeResult, kern: Mapping[int, float], cd: float, pa: float | None,
                 cap: int) -> Any:
    """The efficiency block the fit prices with: the kernel's rates by rows up to ``cap``, PyTorch's above at
    ``cd``, memory fraction 1 (the caller applies its own), compute and memory adding, and the prefill attention at
    ``pa`` (None: at ``cd``, like every other operator)."""
    table = {**kern, **{m: v for m, v in (rows_table(res, cd, cap, ceiling=max(1.0, cd)) or {}).items() if m > cap}}
    return base.model_copy(update={"compute_default": cd, "memory_default": 1.0, "compute_by_rows": table,
                                   "compute_memory_overlap": None, "prefill_attention_compute": pa})


#: the least spread, over the fitted prefill steps, of the causal attention's share of their time for the fit to
#: tell its rate from the GEMMs' (below it the steps cannot, and the attention stays at ``compute_default``)
ATTENTION_SHARE_SPREAD = 0.05


def _fit_prefill_fractions(sets: list[tuple[Any, dict[int, float]]], chip: ChipSpec, base: Any, res: ProbeResult,
                           kern: Mapping[int, float], cd: float, pa: float | None, cap: int, f: float
                           ) -> tuple[float, float | None]:
    """One step of the prefill fit: each prefill step (``sets``: (model, tokens -> measured seconds)) priced at
    (``cd``, ``pa``) splits into its GEMMs' and other operators' compute (scaling as 1 / cd), its causal attention
    pairs' compute (as 1 / pa) and the rest (memory); the two scales that best reproduce the steps (least squares
    in relative error, each model weighing alike) give the next ``cd`` and ``pa``. When the attention's share of the
    steps does not vary by ATTENTION_SHARE_SPREAD (one length, or steps it barely touches) or the two scales come
    out unphysical, one scale for all compute (the geometric mean of what reproduces each step), ``pa`` unchanged."""
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    a0 = cd if pa is None else pa
    rows, rhs, weights, logs = [], [], [], []
    for arch, steps in sets:
        if not steps:
            continue
        prices = []
        for c, a in ((cd, a0), (cd * 1.25, a0), (cd, a0 * 1.25)):
            eff = _prefill_eff(base, res, kern, c, a, cap)
            cm = cost_model_for(arch, chip, precision="fp32", kv="fp32", efficiency=eff)
            prices.append({t: _price_step(cm, StepShape.from_lists(prefill=[(t, 0)]), f, 0.0) for t in steps})
        for t, meas in steps.items():
            g = 5.0 * (prices[0][t] - prices[1][t])  # 1 - 1/1.25 = 0.2 of the part that scales
            a = 5.0 * (prices[0][t] - prices[2][t])
            rows.append([g / meas, a / meas])
            rhs.append(1.0 - (prices[0][t] - g - a) / meas)
            weights.append(1.0 / np.sqrt(len(steps)))
        logs.append(float(np.mean([np.log(prices[0][t] / m) for t, m in steps.items()])))
    if not rows:
        return cd, pa
    m, y, w = np.array(rows), np.array(rhs), np.array(weights)
    shares = m[:, 1] / m.sum(axis=1).clip(min=1e-12)
    if len(rows) >= 2 and shares.max() - shares.min() >= ATTENTION_SHARE_SPREAD:
        (sg, sa), *_ = np.linalg.lstsq(m * w[:, None], y * w, rcond=None)
        if sg > 0.2 and sa > 0.2 and a0 / sa <= max(1.0, cd / sg):
            return cd / float(sg), a0 / float(sa)
    return cd * float(np.exp(np.mean(logs))), pa


@dataclass(frozen=True)
class AttentionFit:
    """``efficiency.decode_attention_ns`` fitted on the probe's decode steps at several contexts."""

    ns: float
    #: (batch, context) -> (measured, priced with the fitted term and the batch's intercept) seconds
    points: dict[tuple[int, int], tuple[float, float]]
    #: root mean square and largest |priced / measured - 1| over the points (both models' when both were measured)
    rms_error: float
    worst_error: float
    #: the served model's steps, as ``points`` (empty when the probe did not time them)
    served_points: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    #: each model's own least-squares slope (ns), fitted alone: the term transfers when they agree
    by_model: dict[str, float] = field(default_factory=dict)
    #: the served model's steps (batch, context) -> (measured, priced by the chip with the fitted term, no
    #: intercept, engine overheads set aside) seconds: what the simulator prices for the served model's steps
    served_priced: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    #: each batch's own least-squares slope (ns) over both models' steps at that batch: the term holds across batches
    #: when they agree (a CPU kernel whose per-key cost grows with the batch shows here first)
    by_batch: dict[int, float] = field(default_factory=dict)


def attention_least_squares(steps: Mapping[Any, dict[int, float]], base: Mapping[Any, dict[int, float]],
                            pairs_per_key: float | Mapping[Any, float]) -> tuple[float, dict[Any, float]]:
    """The seconds per (query head, key, layer) pair and one intercept per batch that best explain, by least
    squares, what each decode step took beyond ``base`` (the chip's price without the term), per row of its batch:
    (measured[b][ctx] - base[b][ctx]) / b = intercept[b] + slope x pairs_per_key x ctx. Each batch weighs alike
    (per row); the intercepts absorb what the decode steps cost apart from attention. Slope floored at 0.
    Steps of several models: key them ``(model, batch)`` and give ``pairs_per_key`` per key (layers x query
    heads of that key's model); the slope is shared, the intercepts are per key."""
    groups = list(steps)
    keys = [(g, c) for g in groups for c in sorted(steps[g])]
    a = np.zeros((len(keys), len(groups) + 1))
    y = np.zeros(len(keys))
    for i, (g, c) in enumerate(keys):
        b = g[-1] if isinstance(g, tuple) else g
        a[i, groups.index(g)] = 1.0
        a[i, -1] = (pairs_per_key[g] if isinstance(pairs_per_key, Mapping) else pairs_per_key) * c
        y[i] = (steps[g][c] - base[g][c]) / b
    sol = np.linalg.lstsq(a, y, rcond=None)[0]
    if sol[-1] < 0:  # no measurable cost per key: the intercepts alone
        sol = np.append(np.linalg.lstsq(a[:, :-1], y, rcond=None)[0], 0.0)
    return float(sol[-1]), {g: float(sol[i]) for i, g in enumerate(groups)}


def _unpriced_model(arch: Any, chip: ChipSpec) -> Any:
    """``arch`` on ``chip`` at fp32 with the engine's overheads and the attention term set to 0."""
    from jalapeno.sim.factory import cost_model_for

    zero = {k: 0.0 for k in ("step_overhead_us", "layer_overhead_us", "seq_overhead_us", "decode_attention_ns",
                             "masked_prefill_attention_ns")}
    return cost_model_for(arch, chip, precision="fp32", kv="fp32", efficiency=chip.efficiency.model_copy(update=zero))


def fit_decode_attention(res: ProbeResult, chip: ChipSpec) -> AttentionFit | None:
    """Per (query head, key, layer) of a decode row, the seconds the probe's decode steps took beyond what ``chip``
    (the small-M terms fitted, overheads set aside) prices for their keys, by least squares over every measured
    context and batch (:func:`attention_least_squares`), in ns: the crossover model's steps and, when the probe
    timed them, the served model's (one slope for both, an intercept per model and batch; each model's own slope
    and the served steps as the fitted chip prices them are kept beside). None when no batch was measured at two
    contexts."""
    from jalapeno.hardware import probe as pr
    from jalapeno.models.catalog import load_model
    from jalapeno.models.hf_config import arch_from_config
    from jalapeno.perf.shape import StepShape

    models = {"crossover": (arch_from_config(pr.llama_config(max(res.decode_layers, 1), *pr.CROSSOVER_MODEL),
                                             "probe-crossover-llama"), res.ctx_step_s)}
    if res.served_model and res.served_ctx_step_s:
        models[res.served_model] = (load_model(res.served_model), res.served_ctx_step_s)
    steps = {(m, b): by for m, (_, got) in models.items() for b, by in got.items() if len(by) >= 2}
    if not res.decode_layers or not any(m == "crossover" for m, _ in steps):
        return None
    cms = {m: _unpriced_model(arch, chip) for m, (arch, _) in models.items()}
    base = {(m, b): {c: cms[m].step(StepShape.from_lists(decode_ctx=[c] * b)).time_s for c in by}
            for (m, b), by in steps.items()}
    per_key = {(m, b): float(models[m][0].num_layers * models[m][0].num_heads) for m, b in steps}
    slope, icpt = attention_least_squares(steps, base, per_key)
    fitted = {(m, b, c): (t, base[(m, b)][c] + b * (icpt[(m, b)] + slope * per_key[(m, b)] * c))
              for (m, b), by in steps.items() for c, t in by.items()}
    errs = np.array([p / t - 1 for t, p in fitted.values()])
    alone = {}
    for m in models:
        sub = {k: v for k, v in steps.items() if k[0] == m}
        if sub and len(models) > 1:
            alone[m] = round(attention_least_squares(sub, base, per_key)[0] * 1e9, 2)
    by_batch = {}
    for b in sorted({k[1] for k in steps}):
        sub = {k: v for k, v in steps.items() if k[1] == b}
        if len({k[1] for k in steps}) > 1:
            by_batch[b] = round(attention_least_squares(sub, base, per_key)[0] * 1e9, 2)
    served = {}
    if len(models) > 1:
        arch = models[res.served_model][0]
        per = float(arch.num_layers * arch.num_heads)
        served = {(b, c): (t, base[(m, b)][c] + slope * per * c * b) for (m, b, c), (t, _) in fitted.items()
                  if m == res.served_model}
    return AttentionFit(round(slope * 1e9, 2), {(b, c): v for (m, b, c), v in fitted.items() if m == "crossover"},
                        float(np.sqrt(np.mean(errs ** 2))), float(np.abs(errs).max()),
                        {(b, c): v for (m, b, c), v in fitted.items() if m == res.served_model}, alone, served,
                        by_batch)


@dataclass(frozen=True)
class MaskedPrefillFit:
    """``efficiency.masked_prefill_attention_ns`` fitted on the probe's prefill chunks on the PyTorch path."""

    ns: float
    #: (chunk, prefix, decode rows) -> (measured, priced without the term, priced with it) seconds, the prices at the
    #: level of the probe's fresh prompt of the same rounds (its measured / priced) and its layers' overhead aside
    points: dict[tuple[int, int, int], tuple[float, float, float]]
    worst_error: float


def fit_masked_prefill(res: ProbeResult, chip: ChipSpec) -> MaskedPrefillFit | None:
    """Per (query head, query, key, layer) of the ``[chunk, context]`` rectangle, the seconds the probe's prefill
    chunks on the PyTorch attention path took beyond what ``chip`` prices for them (engine overheads aside), by
    least squares through 0 over every such step (:data:`~jalapeno.hardware.probe.MASKED_STEPS`), in ns. Each price
    is first scaled by what the longest fresh prompt of the same rounds took over its price (so the compute
    fraction's residual there is not read as the term). Steps the engine now runs on the flash path (a fresh prompt
    beside decode rows: an older probe's ``2048/0/1``) price no rectangle and are left out. None when the probe
    timed no step on the masked path."""
    from jalapeno.hardware import probe as pr
    from jalapeno.models.hf_config import arch_from_config
    from jalapeno.perf.model import masked_prefill_pairs
    from jalapeno.perf.shape import StepShape

    fresh = probe_prefill_steps(res)
    if not res.masked_prefill_s or not fresh or not res.decode_layers:
        return None
    arch = arch_from_config(pr.llama_config(res.decode_layers, *pr.CROSSOVER_MODEL), "probe-crossover-llama")
    cm = _unpriced_model(arch, chip)
    top = max(fresh)
    level = fresh[top] / cm.step(StepShape.from_lists(prefill=[(top, 0)])).time_s
    per_pair = float(arch.num_layers * arch.num_heads)
    rows = {}
    for (c, p, d), t in sorted(res.masked_prefill_s.items()):
        shape = StepShape.from_lists(prefill=[(c, p)], decode_ctx=[c + 1] * d)
        if masked_prefill_pairs(shape):
            rows[(c, p, d)] = (pr._net_of_layer_overhead(res, t), level * cm.step(shape).time_s,
                               per_pair * masked_prefill_pairs(shape))
    if not rows:
        return None
    a = np.array([x for _, _, x in rows.values()])
    y = np.array([t - q for t, q, _ in rows.values()])
    ns = max(0.0, float(a @ y / (a @ a))) if a.any() else 0.0
    pts = {k: (t, q, q + ns * x) for k, (t, q, x) in rows.items()}
    worst = max(abs(w / t - 1) for t, _, w in pts.values())
    return MaskedPrefillFit(round(ns * 1e9, 3), pts, worst)


def _write_fitted(eff: dict[str, Any], name: str, value: float, source: str, note: str) -> None:
    """Set ``efficiency.<name>`` to a fitted ``value`` and record its provenance in ``efficiency.fitted``."""
    eff[name] = value
    eff.setdefault("fitted", {})[name] = {"value": value, "status": "fitted", "source": source, "note": note}


def add_masked_prefill(out: dict[str, Any], res: ProbeResult, source: str) -> None:
    """Fit ``masked_prefill_attention_ns`` on the chip mapping ``out`` as fitted so far and write it into its
    efficiency block (provenance in ``efficiency.fitted``); nothing when the probe timed no such chunk."""
    from jalapeno.hardware.schema import ChipSpec

    fit = fit_masked_prefill(res, ChipSpec.model_validate(out))
    if fit is None:
        return
    steps = ", ".join(f"{c}/{p}/{d}: {t * 1e3:.1f}/{q * 1e3:.1f}/{w * 1e3:.1f}"
                      for (c, p, d), (t, q, w) in sorted(fit.points.items()))
    note = (f"least squares through 0 over the probe's later prefill chunks (after cached tokens: the paged gather, "
            f"and the masked SDPA where the C kernel does not take them), each priced at the level of the fresh "
            f"prompt of the same rounds; ms measured/priced "
            f"without/with the term by chunk/prefix/decode rows: {steps} (worst {fit.worst_error:.1%})")
    _write_fitted(out["efficiency"], "masked_prefill_attention_ns", fit.ns, source, note)


def _ms_by_batch(points: Mapping[tuple[int, int], tuple[float, float]]) -> str:
    return "; ".join(f"batch {b}: " + ", ".join(f"{c}: {m * 1e3:.2f}/{p * 1e3:.2f}" for (bb, c), (m, p)
                                                in sorted(points.items()) if bb == b)
                     for b in sorted({b for b, _ in points}))


def add_decode_attention(out: dict[str, Any], res: ProbeResult, source: str) -> None:
    """Fit ``decode_attention_ns`` on the chip mapping ``out`` as fitted so far and write it into its efficiency
    block (provenance in ``efficiency.fitted``); nothing when the probe lacks steps at two contexts."""
    from jalapeno.hardware.schema import ChipSpec

    fit = fit_decode_attention(res, ChipSpec.model_validate(out))
    if fit is None:
        return
    eff = out["efficiency"]
    note = (f"least squares over the probe's decode steps by context (one intercept per batch); ms measured/"
            f"fitted by context, {_ms_by_batch(fit.points)}")
    if fit.served_points:
        note += (f"; {res.served_model} ({res.served_layers} layers, random weights), the same slope: "
                 f"{_ms_by_batch(fit.served_points)}; each model alone: "
                 + ", ".join(f"{m} {v} ns" for m, v in fit.by_model.items())
                 + f"; {res.served_model} priced by this chip (no intercept, engine overheads aside): "
                 + _ms_by_batch(fit.served_priced))
    if fit.by_batch:
        note += "; each batch alone: " + ", ".join(f"batch {b} {v} ns" for b, v in fit.by_batch.items())
    _write_fitted(eff, "decode_attention_ns", fit.ns, source,
                  note + f" (rms {fit.rms_error:.1%}, worst {fit.worst_error:.1%})")


@dataclass(frozen=True)
class UnfusedFit:
    """``efficiency.unfused_layer_overhead_us`` fitted on the probe's engine loop (:func:`fit_unfused_overhead`)."""

    us: float
    #: the loop's decode-only steps, measured / priced (median): the level every other step is read at
    decode_level: float
    #: per step kind ("unfused" past the crossover, "fused prompt" up to it): steps, median of measured / level -
    #: priced (seconds), its interquartile range
    extra: dict[str, tuple[int, float, tuple[float, float]]]
    cap: int
    layers: int


def fit_unfused_overhead(res: ProbeResult, chip: ChipSpec) -> UnfusedFit | None:
    """Per layer of a step on the PyTorch (unfused) path, the time the probe's engine loop
    (:func:`jalapeno.hardware.probe.measure_engine_loop`) spent in such steps beyond what ``chip`` prices for them:
    every step priced as the simulator prices it (all of ``chip``'s terms, this one at 0), read at the level of the
    loop's own decode-only steps (their median measured / priced, so the machine's state at the loop cancels), the
    median over the steps of more than the fused crossover's tokens of (measured / level - priced), over the served
    model's layers (0 if negative). The steps that prefill on the fused kernel are the check (their median should
    be ~0). None when the loop was not run, or lacks decode-only or unfused steps."""
    from jalapeno.models.catalog import load_model
    from jalapeno.perf.shape import StepShape
    from jalapeno.sim.factory import cost_model_for

    steps = res.engine_loop_steps
    if not steps or not res.served_model or chip.execution is None:
        return None
    cap = int(chip.execution.fused_max_batch.value or 0)
    arch = load_model(res.served_model)
    cm = cost_model_for(arch, chip, precision="fp32", kv="fp32",
                        efficiency=chip.efficiency.model_copy(update={"unfused_layer_overhead_us": 0.0}))

    def shape(pre: tuple[tuple[int, int], ...], rows: int, ctx: int) -> Any:
        q, r = divmod(ctx, rows) if rows else (0, 0)
        return StepShape.from_lists(prefill=list(pre), decode_ctx=[q + 1] * r + [q] * (rows - r))

    priced = [(pre, rows + sum(t for t, _ in pre), t, cm.step(shape(pre, rows, ctx)).time_s)
              for pre, rows, ctx, t in steps]
    decode = [m / p for pre, _, m, p in priced if not pre and p > 0]
    if not decode:
        return None
    level = float(np.median(decode))
    kinds: dict[str, list[float]] = {}
    for pre, tokens, m, p in priced:
        if pre:
            kinds.setdefault("unfused" if tokens > cap else "fused prompt", []).append(m / level - p)
    if "unfused" not in kinds:
        return None
    extra = {k: (len(v), float(np.median(v)), (float(np.percentile(v, 25)), float(np.percentile(v, 75))))
             for k, v in kinds.items()}
    us = max(0.0, extra["unfused"][1]) / arch.num_layers * 1e6
    return UnfusedFit(round(us, 1), level, extra, cap, int(arch.num_layers))


def add_unfused_overhead(out: dict[str, Any], res: ProbeResult, source: str) -> None:
    """Fit ``unfused_layer_overhead_us`` on the chip mapping ``out`` as fitted so far and write it into its
    efficiency block (provenance in ``efficiency.fitted``); nothing when the probe ran no engine loop."""
    from jalapeno.hardware.schema import ChipSpec

    fit = fit_unfused_overhead(res, ChipSpec.model_validate(out))
    if fit is None:
        return
    kinds = "; ".join(f"{k} ({n} steps): {x * 1e3:+.1f} ms (IQR {lo * 1e3:+.1f} to {hi * 1e3:+.1f})"
                      for k, (n, x, (lo, hi)) in sorted(fit.extra.items()))
    note = (f"the probe's engine loop of {res.served_model} ({fit.layers} layers, random weights, the server's "
            f"thread policy): median over its steps of more than the fused crossover's {fit.cap} tokens of "
            f"measured / level - priced, over the layers; level = its decode-only steps' median measured / "
            f"priced, {fit.decode_level:.3f}; per step, by kind: {kinds}")
    _write_fitted(out["efficiency"], "unfused_layer_overhead_us", fit.us, source, note)


def served_prefill_check(res: ProbeResult, chip: ChipSpec) -> dict[int, tuple[float, float]]:
    """The served-shape model's prefill steps (tokens -> (measured less its layers' overhead, priced by ``chip``
    with the engine's overheads aside) seconds): whether the compute fraction fitted on the crossover model's
    prefills prices the served model's (its TTFT at concurrency 1). Empty when the probe did not time them."""
    from jalapeno.models.catalog import load_model
    from jalapeno.perf.shape import StepShape

    if not (res.served_model and res.served_prefill_s):
        return {}
    cm = _unpriced_model(load_model(res.served_model), chip)
    fixed = res.served_layers * (res.layer_overhead_us or 0.0) * 1e-6
    return {t: (s - fixed if s - fixed > 0.25 * s else s, cm.step(StepShape.from_lists(prefill=[(t, 0)])).time_s)
            for t, s in sorted(res.served_prefill_s.items())}


def add_served_prefill_check(out: dict[str, Any], res: ProbeResult) -> None:
    """Append :func:`served_prefill_check` to the note of ``efficiency.fitted.compute_default`` (the chip mapping
    ``out`` as fitted so far); nothing when there is no such note or no served prefill."""
    from jalapeno.hardware.schema import ChipSpec

    got = served_prefill_check(res, ChipSpec.model_validate(out))
    fact = out["efficiency"].get("fitted", {}).get("compute_default")
    if not got or fact is None:
        return
    fact["note"] += (f"; {res.served_model} (random weights) prefill step ms measured/priced by tokens: "
                     + ", ".join(f"{t}: {m * 1e3:.1f}/{p * 1e3:.1f}" for t, (m, p) in got.items()))


def _pairs(line: str) -> dict[int, list[float]]:
    """``"1: 9.04/13.29, 4: 9.94/18.03"`` -> {1: [9.04, 13.29], 4: [9.94, 18.03]}."""
    out = {}
    for item in line.split(":", 1)[1].split(","):
        k, _, v = item.strip().partition(": ")
        out[int(k)] = [float(x) for x in v.split("/")]
    return out


def probe_from_chip(chip: ChipSpec) -> ProbeResult:
    """The measurements a probed chip's YAML records (its notes, efficiency block and bandwidth), as a
    :class:`ProbeResult` to refit without probing again (a probe written before the small-M terms existed). The
    crossover model's weight bytes are counted from its shape; the PyTorch GEMM by rows from the notes' by-rows line,
    or on an older probe their ``decode-1`` / ``decode-32`` / ``prefill-512`` rates (the table uses rows above the
    crossover only)."""
    import re

    from jalapeno.hardware import probe as pr
    from jalapeno.models.hf_config import arch_from_config

    notes = {n.split(":", 1)[0]: n for n in chip.notes}
    res = pr.ProbeResult("cpu", chip.name, float(chip.main_memory.capacity_gb) if chip.main_memory else 0.0)
    res.read_gbps = {k: v[0] for k, v in _pairs(notes["read GB/s by threads"]).items()}
    res.copy_gbps = {k: v[0] for k, v in _pairs(notes["copy GB/s by threads"]).items()}
    mm = dict(re.findall(r"(decode-1|decode-32|prefill-512) ([0-9.e-]+)", notes["matmul fp32 TFLOPS"]))
    res.matmul_tflops = {"fp32": {k: float(v) for k, v in mm.items()}}
    by_rows = next((n for k, n in notes.items() if k.startswith("matmul TFLOPS by rows")), None)
    res.rows_tflops = {m: v[0] for m, v in _pairs(by_rows).items()} if by_rows else \
        {int(k.split("-")[1]): float(v) for k, v in mm.items()}  # a probe from before the by-rows shapes
    steps = _pairs(notes["decode step ms fused/pytorch by batch"])
    res.fused_step_s = {b: v[0] / 1e3 for b, v in steps.items()}
    res.torch_step_s = {b: v[1] / 1e3 for b, v in steps.items()}
    dot = notes.get("decode step ms fused panels/dot tiles by batch")
    res.dot_step_s = {b: v[1] / 1e3 for b, v in _pairs(dot).items()} if dot else {}
    ctx_key = next((k for k in notes if k.startswith("decode step ms at context")), None)
    if ctx_key:  # "decode step ms at context 65/129/577 by batch: 1: a/b/c, 8: ..." (two contexts before)
        ctxs = [int(c) for c in ctx_key.split("context ", 1)[1].split(" ", 1)[0].split("/")]
        res.ctx_step_s = {b: {c: x / 1e3 for c, x in zip(ctxs, v, strict=True)}
                          for b, v in _pairs(notes[ctx_key]).items()}
    served_key = next((k for k in notes if k.startswith("served-model decode step ms at context")
                       and "by small batch" not in k), None)
    if served_key:  # "served-model decode step ms at context 65/.../2305 by batch (smollm2-135m, 30 layers, ...)"
        got = re.search(r"context ([0-9/]+) by batch \(([^,]+), ([0-9]+) layers", served_key)
        if got:
            ctxs = [int(c) for c in got[1].split("/")]
            res.served_model, res.served_layers = got[2], int(got[3])
            res.served_ctx_step_s = {b: {c: x / 1e3 for c, x in zip(ctxs, v, strict=True)}
                                     for b, v in _pairs(notes[served_key].split("random weights)", 1)[1]).items()}
    small_key = next((k for k in notes if k.startswith("served-model decode step ms at context")
                      and "by small batch" in k), None)
    if small_key:  # "served-model decode step ms at context 65 by small batch (smollm2-135m, ...): 2: a, 4: b"
        res.served_small_step_s = {b: v[0] / 1e3 for b, v in
                                   _pairs(notes[small_key].split("random weights)", 1)[1]).items()}
    sp_key = next((k for k in notes if k.startswith("served-model prefill step ms by tokens")), None)
    got = re.search(r"\(([^,]+), ([0-9]+) layers", sp_key or "")
    if got:  # "served-model prefill step ms by tokens (smollm2-135m, 30 layers, random weights): 512: 1115.20"
        res.served_model, res.served_layers = got[1], int(got[2])
        line = notes[sp_key].split("random weights)", 1)[1]
        res.served_prefill_s = {t: v[0] / 1e3 for t, v in _pairs(line).items()}
    masked = notes.get("masked prefill step ms by chunk/prefix/decode rows")
    if masked:  # "masked prefill step ms by chunk/prefix/decode rows: 512/1536/1: 123.4, 1024/1024/0: 678.9"
        res.masked_prefill_s = {tuple(int(x) for x in k.split("/")): float(v) / 1e3
                                for k, v in re.findall(r"([0-9]+/[0-9]+/[0-9]+): ([0-9.]+)", masked.split(":", 1)[1])}
    loop = next((n for k, n in notes.items() if k.startswith("engine loop steps")), None)
    if loop:
        res.engine_loop_steps = pr.parse_engine_loop_note(loop)
    fe = next((n for k, n in notes.items() if k.startswith("serving front end ms per request")), None)
    if fe:  # "serving front end ms per request (send -> engine thread, median; ...): 3.21"
        res.front_end_ms = float(fe.rsplit(":", 1)[1])
    pre = notes.get("prefill step ms (GFLOP) by tokens")
    res.prefill_s = {t: (v[1] * 1e9, v[0] / 1e3) for t, v in _pairs(pre).items()} if pre else {}
    eff = chip.efficiency
    res.step_overhead_us, res.layer_overhead_us = eff.step_overhead_us, eff.layer_overhead_us
    res.seq_overhead_us = eff.seq_overhead_us
    res.decode_layers = 6
    arch = arch_from_config(pr.llama_config(6, *pr.CROSSOVER_MODEL), "probe-crossover-llama")
    res.decode_bytes = 4.0 * arch.total_params()
    got = re.search(r"\(([0-9.]+) GFLOP in ([0-9.]+) ms", eff.source)
    if got:
        res.prefill_flops, res.prefill_step_s = float(got[1]) * 1e9, float(got[2]) / 1e3
    if pr.PREFILL_TOKENS in res.prefill_s:
        res.prefill_flops, res.prefill_step_s = res.prefill_s[pr.PREFILL_TOKENS]
    return res


def add_small_m(out: dict[str, Any], res: ProbeResult, cap: int, source: str) -> None:
    """Fit the small-M terms on the chip as measured so far and write them, with
    the memory and compute fractions refitted alongside, into ``out``'s efficiency block (provenance in
    ``efficiency.fitted``). Nothing changes when the probe lacks what the fit needs."""
    from jalapeno.hardware.probe import PREFILL_TOKENS, ROWS_KN
    from jalapeno.hardware.schema import ChipSpec

    fit = fit_small_m(res, ChipSpec.model_validate(out), cap)
    if fit is None:
        return
    eff = out["efficiency"]
    ms = ", ".join(f"{b}: {fit.measured_s[b] * 1e3:.2f}/{fit.priced_s[b] * 1e3:.2f}" for b in sorted(fit.measured_s))
    k, n = ROWS_KN
    rows = ", ".join(f"{m}: {v:.3g}" for m, v in sorted(res.rows_tflops.items()))
    eff.update(compute_default=fit.compute_default, memory_default=fit.memory_default,
               compute_by_rows=fit.compute_by_rows, compute_memory_overlap=fit.overlap,
               prefill_attention_compute=fit.prefill_attention)
    eff["source"] += (
        f"; small-M terms: compute_by_rows = the GEMM rate of the path the engine takes at M rows: the fused "
        f"kernel's up to the crossover ({cap}), at each measured batch what reproduces its decode step (less the "
        f"layers' overhead; the served model's batches, the crossover model's above them), PyTorch's above it, "
        f"compute_default x its M x {k} "
        f"x {n} TFLOPS over its {max(res.rows_tflops, default=PREFILL_TOKENS)}-row TFLOPS; compute and memory add "
        f"(compute_memory_overlap 0); memory_default from the batch-1 steps (their GEMMs at compute_default), "
        f"compute_default (and, where the prefill lengths tell it apart, prefill_attention_compute) from the "
        f"prefill steps")
    fitted = eff.setdefault("fitted", {})
    if fit.prefill_s:
        pre = ", ".join(f"{t}: {m * 1e3:.1f}/{q * 1e3:.1f}" for t, (m, q) in sorted(fit.prefill_s.items()))
        worst = max(abs(q / m - 1) for m, q in fit.prefill_s.values())
        spre = ", ".join(f"{k.split(' ', 1)[1]}: {m * 1e3:.1f}/{q * 1e3:.1f}" for k, (m, q) in fit.served_s.items()
                         if k.startswith("prefill "))
        if spre:
            spre = f"; {res.served_model} (random weights) prefill step ms measured/priced by tokens: {spre}"
        how = ("one fraction for the GEMMs and the other operators, one for the causal attention pairs "
               "(prefill_attention_compute), the two that best reproduce the prefill steps above the crossover"
               if fit.prefill_attention is not None else
               "one fraction for every prefill length (geometric mean of what reproduces each)")
        fitted["compute_default"] = {
            "value": fit.compute_default, "status": "fitted", "source": source,
            "note": f"{how}; prefill step ms measured/priced by tokens: {pre} (worst {worst:.1%})"}
        if fit.prefill_attention is not None:
            fitted["prefill_attention_compute"] = {
                "value": fit.prefill_attention, "status": "fitted", "source": source,
                "note": f"the fraction of the fp32 peak at which a prefill's causal attention pairs ran, fitted with "
                        f"compute_default on the prefill steps (their attention share grows with the prompt); ms "
                        f"measured/priced by tokens: {pre}{spre}"}
    if fit.peak_scale > 1.0:  # the real prefill steps beat the microbenchmark: its "peak" was not the peak
        fp32 = out["compute_tflops"]["fp32"]
        raised = round(fp32["value"] * fit.peak_scale, 6)
        fp32.update(value=raised, status="fitted", note=(
            f"the rate the probe's prefill steps reached (x{fit.peak_scale:.3f} the {fp32['value']:.4g} TFLOPS a "
            f"torch matmul 512xKxK measured, which they beat): compute_default 1 at this peak"))
    joint = ""
    if fit.served_s:
        joint = (f"; jointly with {res.served_model}'s steps ({res.served_layers} layers, random weights; memory "
                 f"fraction, kernel rates and compute fraction fitted over both models, each weighing alike), ms "
                 f"measured/priced: "
                 + ", ".join(f"{k}: {m * 1e3:.2f}/{q * 1e3:.2f}" for k, (m, q) in fit.served_s.items())
                 + f" (worst {max(abs(q / m - 1) for m, q in fit.served_s.values()):.1%})")
    fitted["compute_memory_overlap"] = {
        "value": fit.overlap, "status": "inferred", "source": source,
        "note": f"compute and memory add (the kernel's GEMM rate by rows is measured with them adding); decode step "
                f"ms measured/priced by batch: {ms} (worst {fit.worst_error:.1%}){joint}"}
    fitted["compute_by_rows"] = {
        "value": fit.compute_by_rows[min(fit.compute_by_rows)], "status": "measured", "source": source,
        "note": f"the 1-row fraction; PyTorch GEMM TFLOPS of M x {k} x {n} by M: {rows}"}


def fitted_chip_dict(res: ProbeResult, key: str, source: str) -> dict[str, Any]:
    """The probe's chip mapping (:func:`jalapeno.hardware.probe.chip_dict`) with the small-M terms fitted into its
    efficiency block when the probe measured what the fit needs (the crossover steps, the GEMM by rows)."""
    from jalapeno.hardware import probe as pr

    out = pr.chip_dict(res, key, source)
    cap = int(out.get("execution", {}).get("fused_max_batch", {}).get("value") or 0)
    if cap:
        add_small_m(out, res, cap, source)
    add_decode_attention(out, res, source)
    add_masked_prefill(out, res, source)
    add_unfused_overhead(out, res, source)
    add_served_prefill_check(out, res)
    return out



def refit_probe_file(src: Path, out_dir: Path, command: str, front_end: bool = False) -> tuple[Path, str]:
    """Fit the small-M terms of the probe YAML ``src`` from the measurements its notes record and write the chip
    to ``out_dir`` (``src``'s own directory replaces the file). ``front_end``: when the chip records no serving
    front end, time it now on this machine (:func:`jalapeno.calibration.front_end.measure_front_end`; its line
    joins the notes). Returns the path and a one-line summary."""
    import datetime as _dt

    import yaml

    from jalapeno.errors import CalibrationError
    from jalapeno.hardware.catalog import load_spec_file

    chip = load_spec_file(src)
    if not any("decode" in n for n in chip.notes):
        raise CalibrationError(f"{src}: not a `jalapeno hardware probe` chip (its notes record no decode steps "
                               "by batch); probe this machine first: jalapeno hardware probe")
    res = probe_from_chip(chip)
    timed: list[str] = []
    if front_end and res.front_end_ms is None:
        from jalapeno.calibration.front_end import measure_front_end
        from jalapeno.hardware.probe import front_end_note

        measure_front_end(res)
        timed = [front_end_note(res.front_end_ms)] if res.front_end_ms is not None else res.notes[-1:]
    data = fitted_chip_dict(res, chip.key, f"{command} ({_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC)")
    data["notes"] = [*chip.notes, *timed, f"small-M terms refitted from the notes above by {command}"]
    data["description"] = chip.description
    if chip.execution is not None and chip.execution.thread_policy is not None:
        # a measurement the refit does not redo (its timings live in the fact's note, not in the notes): keep it
        data.setdefault("execution", {})["thread_policy"] = chip.execution.thread_policy.model_dump(mode="json")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{chip.key}.yaml"
    path.write_text(f"# {chip.key}: {src.name} with its small-M terms refitted ({command})\n"
                    + yaml.safe_dump(data, sort_keys=False, width=120), encoding="utf-8")
    eff = load_spec_file(path).efficiency
    line = (f"{path}: compute_default {eff.compute_default}, memory_default {eff.memory_default}, "
            f"compute_memory_overlap {eff.compute_memory_overlap}, decode_attention_ns {eff.decode_attention_ns}")
    if "compute_memory_overlap" in eff.fitted:
        line += f"; {eff.fitted['compute_memory_overlap'].note}"
    att = eff.fitted.get("decode_attention_ns")
    if att is not None and "each model alone: " in (att.note or ""):  # the transfer check, where the lead looks
        line += "; decode_attention_ns, " + att.note.split("each model alone: ", 1)[1].split(";", 1)[0]
    if att is not None and "each batch alone: " in (att.note or ""):
        line += "; " + att.note.split("each batch alone: ", 1)[1].split(" (rms", 1)[0]
    if eff.masked_prefill_attention_ns:
        line += f"; masked_prefill_attention_ns {eff.masked_prefill_attention_ns}"
    unf = eff.fitted.get("unfused_layer_overhead_us")
    if unf is not None:
        line += (f"; unfused_layer_overhead_us {eff.unfused_layer_overhead_us} ("
                 + (unf.note or "").split("per step, by kind: ", 1)[-1] + ")")
    if eff.request_overhead_ms:
        line += f"; request_overhead_ms {eff.request_overhead_ms} (the serving front end)"
    return path, line
