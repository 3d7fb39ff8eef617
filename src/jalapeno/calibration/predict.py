"""Predict one measured point with the serving simulator (the engine over ``SimBackend``, in-process).

The same scheduler, KV block manager, cost model and engine factory (:mod:`jalapeno.sim.factory`) as
``jalapeno simulate``; only the efficiency block can be
overridden, which is what calibration fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jalapeno.calibration.points import SimSpec
from jalapeno.hardware.schema import ChipSpec, Efficiency

#: most sequences an offline (max-throughput) run keeps in flight; trtllm-bench sizes its batch from the KV
#: cache, capped at a few thousand
OFFLINE_MAX_SEQS = 2048
#: requests in an offline run, per sequence slot (enough that the ramp-up and drain are a small share)
OFFLINE_PROMPTS_PER_SLOT = 3

#: calibration metric -> (``jalapeno simulate`` metrics key, factor to SI units)
SIM_KEYS = {
    "output_tput_per_gpu": ("output_throughput_per_chip", 1.0),
    "total_tput_per_gpu": ("total_token_throughput_per_chip", 1.0),
    "median_tpot": ("median_tpot_ms", 1e-3),
    "median_ttft": ("median_ttft_ms", 1e-3),
    "median_e2e_latency": ("median_e2el_ms", 1e-3),
    "median_interactivity": ("median_interactivity", 1.0),
    "mean_ttft": ("mean_ttft_ms", 1e-3),
    "mean_itl": ("mean_itl_ms", 1e-3),
}


@lru_cache(maxsize=None)
def _chip(key: str) -> ChipSpec:
    from jalapeno.hardware.catalog import get_chip

    return get_chip(key)


@lru_cache(maxsize=None)
def _model(name: str):
    from jalapeno.models.catalog import load_model

    return load_model(name)


def efficiency_of(chip: str) -> Efficiency:
    """The catalogue's efficiency block of ``chip``."""
    return _chip(chip).efficiency


#: the efficiency fields a transfer of one chip's fit may move (the overhead terms and front ends: ``fit_terms.py``)
TRANSFER_FIELDS = ("step_overhead_us", "layer_overhead_us", "moe_layer_overhead_us", "kernel_overhead_us",
                   "seq_overhead_us", "expert_overhead_us", "prefill_layer_overhead_us", "prefill_kernel_overhead_us", "prefill_expert_overhead_us",
                   "prefill_token_overhead_ns", "prefill_collective_overlap", "request_overhead_ms",
                   "request_overhead_us_per_token", "pdl_kernel_fraction")
#: always moved: a per-kernel fit sets the per-layer pair to 0, and left at the target's values they would count
#: twice; the PDL share is fitted together with the per-kernel cost it hides a share of (a source chip without
#: PDL-launched rows moves 0: the target's own share would be a value fitted on the target)
_STRUCTURAL = ("layer_overhead_us", "moe_layer_overhead_us", "pdl_kernel_fraction")


def transfer_params(chip: str) -> dict[str, float]:
    """What a cross-vendor transfer moves from ``chip`` (``fit_terms.py eval --params``): its overhead fields that a
    fit set (``efficiency.fitted``), the per-layer and per-MoE-layer constants, and its per-stack front ends as
    ``fw.<stack>``. The per-stack kernel-path terms (``framework_fp8_moe_layer_us``,
    ``framework_prefill_host_kernel_us``: a stack's path on one vendor's kernels and host) stay with their chip
    family, as the chip facts do (docs/fidelity.md step 12b). Never a chip fact: ``ChipSpec.kernel_launch_us`` and the roofline fractions stay the target's."""
    eff = efficiency_of(chip)
    out = {k: float(getattr(eff, k)) for k in TRANSFER_FIELDS if k in eff.fitted or k in _STRUCTURAL}
    out.update({f"fw.{fw}": float(ms) for fw, ms in eff.framework_overhead_ms.items()})
    return out


def cost_model(spec: SimSpec, efficiency: Efficiency | None = None):
    """The cost model of ``spec``'s configuration under ``efficiency`` (the chip's when None), its main memory
    budgeted as the point's serving stack was launched (:func:`jalapeno.calibration.launch.launch_memory`). Cached per
    (configuration, efficiency values): a fit prices the same configuration under the same values many times
    (reruns, before/after tables), and a :class:`~jalapeno.perf.CostModel` does not change once built."""
    from jalapeno.calibration.launch import launch_memory

    eff = efficiency if efficiency is not None else efficiency_of(spec.chip)
    return _cost_model(spec.model, spec.chip, spec.layout, spec.weights, spec.kv, eff.model_dump_json(),
                       launch_memory(spec))


@lru_cache(maxsize=256)
def _cost_model(model: str, chip: str, lay, weights: str, kv: str, eff_json: str, memory=None):
    """``memory``: the serving stack's :class:`~jalapeno.perf.types.MemoryRule` as launched (None: the default)."""
    from jalapeno.perf import CostModel, Parallelism, Precision

    par = Parallelism(tp=lay.tp, ep=lay.ep, dp_attention=lay.dp_attention)
    return CostModel(_model(model), _chip(chip), par, Precision(weights=weights, kv=kv),
                     efficiency=Efficiency.model_validate_json(eff_json), memory_rule=memory)


def offline_concurrency(spec: SimSpec, kv_capacity_tokens: int) -> int:
    """Sequences an offline run keeps in flight: as many full-length requests as the KV cache holds."""
    return max(1, min(OFFLINE_MAX_SEQS, kv_capacity_tokens // (spec.isl + spec.osl + 16)))


def framework_profile(spec: SimSpec) -> str | None:
    """The serving-framework profile (:mod:`jalapeno.perf.frameworks`) an InferenceX row runs with; None for
    NIM and offline rows (they keep the chip's generic request overhead)."""
    from jalapeno.errors import ConfigError
    from jalapeno.perf.frameworks import get_framework

    if spec.kind != "ix" or not spec.framework:
        return None
    try:
        return get_framework(spec.framework).key
    except ConfigError:
        return None


def simulate(spec: SimSpec, efficiency: Efficiency | None = None, *, seed: int = 0,
             prompts_per_concurrency: int | None = None, frameworks: bool = True,
             request_overhead_ms: float | None = None, kv_handoff_ms: float | None = None,
             scheduling: bool = True) -> dict[str, float]:
    """Predicted metrics of ``spec`` (keys of :data:`jalapeno.calibration.points.METRICS`, SI units).

    ``frameworks``: InferenceX rows use their serving framework's request overhead (else the chip's generic
    one); ``request_overhead_ms`` overrides both (what ``--fit-frameworks`` searches); ``kv_handoff_ms``
    overrides a disaggregated stack's handoff latency (disaggregated points only). ``scheduling``: run the
    point's serving-stack scheduling policy (:func:`jalapeno.calibration.launch.launch_policy`; False: the
    engine scheduler's default, vLLM-style mixed prefill, for every stack).
    Raises :class:`~jalapeno.errors.CapacityError` when the model does not fit."""
    if getattr(spec, "disagg", None) is not None:  # both pools, per-pool layouts (calibration.disagg)
        from jalapeno.calibration.disagg import simulate_disagg

        return simulate_disagg(spec, efficiency, seed=seed, prompts_per_concurrency=prompts_per_concurrency,
                               frameworks=frameworks, request_overhead_ms=request_overhead_ms,
                               kv_handoff_ms=kv_handoff_ms)
    run = run_point(spec, efficiency, seed=seed, prompts_per_concurrency=prompts_per_concurrency,
                    frameworks=frameworks, request_overhead_ms=request_overhead_ms, scheduling=scheduling)
    return run.predicted


@dataclass
class PointRun:
    """One aggregated point's simulation: the simulator's result, the cost model and efficiency it ran with,
    the engine, the concurrency, and the predicted metrics (SI units, :data:`SIM_KEYS`)."""

    result: Any  # jalapeno.sim.SimResult
    cost_model: Any
    efficiency: Efficiency
    engine: Any
    concurrency: int
    predicted: dict[str, float]


def run_point(spec: SimSpec, efficiency: Efficiency | None = None, *, seed: int = 0,
              prompts_per_concurrency: int | None = None, frameworks: bool = True,
              request_overhead_ms: float | None = None, backend_cls=None, scheduling: bool = True) -> PointRun:
    """:func:`simulate` of an aggregated point, keeping what it ran (``backend_cls``: a
    :class:`~jalapeno.sim.backend.SimBackend` subclass that observes the steps, see
    :mod:`jalapeno.calibration.linearise`)."""
    from jalapeno.perf.frameworks import apply_framework
    from jalapeno.sim import Speculation, build_sim_engine, run_workload
    from jalapeno.workload import inferencex_workload

    eff = efficiency if efficiency is not None else efficiency_of(spec.chip)
    if frameworks:
        eff = apply_framework(eff, framework_profile(spec))
    if request_overhead_ms is not None:
        eff = eff.model_copy(update={"request_overhead_ms": float(request_overhead_ms)})
    from jalapeno.calibration.launch import launch_efficiency

    eff = launch_efficiency(spec, eff)  # the benchmark script's cost-model launch flags (PDL)
    cm = cost_model(spec, eff)
    spec_dec = None
    if spec.spec_tokens:
        spec_dec = Speculation("mtp", spec.spec_tokens, spec.spec_acceptance)
    if spec.concurrency is None:
        conc = offline_concurrency(spec, int(cm.memory_plan().kv_capacity_tokens))
        per = prompts_per_concurrency or OFFLINE_PROMPTS_PER_SLOT
    else:
        conc = spec.concurrency
        per = prompts_per_concurrency or spec.num_prompts_per_concurrency
    # the simulator's default limits (jalapeno.sim.factory.SimLimits): a token budget of 8192 per step (the
    # vLLM/SGLang/TRT-LLM chunked-prefill default on Hopper); never fewer sequence slots than ``conc``
    kw = {} if backend_cls is None else {"backend_cls": backend_cls}
    if scheduling:  # the serving stack's prefill scheduling, as InferenceX launched it
        from jalapeno.calibration.launch import launch_policy
        from jalapeno.sim.factory import SimLimits

        policy = launch_policy(spec)
        if policy is not None:
            kw["limits"] = SimLimits(scheduling=policy)
    engine = build_sim_engine(cm, speculation=spec_dec, in_flight=conc, **kw)
    attach = getattr(engine.backend, "attach_clock", None)
    if attach is not None:  # an observing backend reads step start times off the engine's clock
        attach(engine.clock)
    wl = inferencex_workload(spec.isl, spec.osl, concurrency=conc, num_prompts=per * conc,
                             range_ratio=spec.range_ratio, seed=seed)
    res = run_workload(engine, wl)
    m = res.metrics(num_chips=cm.num_chips)
    out = {k: float(m[s]) * f for k, (s, f) in SIM_KEYS.items() if s in m and m[s] is not None}
    out["concurrency"] = float(conc)
    return PointRun(res, cm, eff, engine, conc, out)


def with_efficiency(base: Efficiency, **changes) -> Efficiency:
    """``base`` with some fields replaced (``compute``/``memory`` dicts are merged, not replaced)."""
    upd = dict(changes)
    if "compute" in upd:
        upd["compute"] = {**base.compute, **upd["compute"]}
    if "memory" in upd:
        upd["memory"] = {**base.memory, **upd["memory"]}
    return base.model_copy(update=upd)


__all__ = ["simulate", "run_point", "PointRun", "framework_profile", "cost_model", "efficiency_of", "transfer_params", "TRANSFER_FIELDS", "with_efficiency", "offline_concurrency"]
