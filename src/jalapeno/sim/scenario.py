"""``jalapeno simulate``: one serving scenario (model × hardware × parallelism × workload) → InferenceX metrics.

:class:`Scenario` holds the choices under the CLI's flag names (so a scenarios CSV uses the same names as
columns); :func:`run_scenario` builds the cost model(s), the simulated engine(s) and the workload, runs it on
the virtual clock and returns the metrics dict (``jalapeno.metrics`` keys, plus chain latencies when chained).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from jalapeno.errors import ConfigError
from jalapeno.sim.backend import SpecDecode
from jalapeno.sim.client import run_workload
from jalapeno.sim.cluster import Cluster, KVLink
from jalapeno.sim.factory import DEFAULT_MIN_NUM_SEQS, SimLimits, build_sim_engines, cost_model_for

PRECISIONS = ("native", "bf16", "fp8", "fp4", "mxfp4", "int4")


@dataclass
class Scenario:
    """One simulation. Field names are the ``jalapeno simulate`` flags with ``-`` → ``_``."""

    model: str = ""
    hardware: str = ""
    tp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    dp_attention: bool = False
    #: weights as InferenceX names them: fp8 = block-scaled FP8; fp4 = MXFP4 (MoE: routed experts only)
    precision: str = "native"
    kv_dtype: str = "bf16"
    isl: int = 1024
    osl: int = 1024
    concurrency: int | None = None
    num_prompts: int | None = None
    random_range_ratio: float = 0.8
    #: "ix": lengths in [r·L, L] (InferenceX); "vllm": [L(1-r), L(1+r)]
    range_mode: str = "ix"
    request_rate: float | None = None
    arrival: str = "poisson"
    max_concurrency: int | None = None
    spec_decode: str | None = None
    spec_tokens: int = 1
    #: acceptance rate per draft position: one number, or "a1,a2,..." (one per speculative token)
    acceptance: str = "0.7"
    draft_model: str | None = None
    prefill_hardware: str | None = None
    prefill_workers: int | None = None
    prefill_tp: int | None = None
    prefill_ep: int | None = None
    decode_hardware: str | None = None
    decode_workers: int | None = None
    decode_tp: int | None = None
    decode_ep: int | None = None
    chain_calls: int = 1
    goodput: list[str] = field(default_factory=list)
    seed: int = 0
    max_num_seqs: int | None = None
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    trace: str | None = None
    hardware_dir: list[str] = field(default_factory=list)
    #: serving-framework profile (jalapeno.perf.frameworks: vllm | sglang | trt-llm): its per-request front-end
    #: latency replaces the chip's generic ``efficiency.request_overhead_ms``; None keeps the chip's
    framework: str | None = None
    #: power cap in watts: clocks lowered until the modelled power fits (jalapeno.hardware.power_cap); None = rated
    power_cap_w: float | None = None

    @property
    def disaggregated(self) -> bool:
        return any(
            getattr(self, f"{p}_{x}") is not None
            for p in ("prefill", "decode")
            for x in ("hardware", "workers", "tp", "ep")
        )

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Scenario":
        """A scenario from a CSV row (strings); empty cells keep defaults. Unknown columns are errors."""
        known = {f.name: f for f in fields(cls)}
        kw: dict[str, Any] = {}
        for key, raw in row.items():
            if key is None:
                raise ConfigError("scenario row has more cells than the header has columns")
            name = key.strip().lower().replace("-", "_")
            if name in ("error", "") or name not in known and name in _OUTPUT_COLUMNS:
                continue
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise ConfigError(f"unknown scenario column '{key}'{hint}")
            val = "" if raw is None else str(raw).strip()
            if val == "":
                continue
            kw[name] = _coerce(name, known[name].type, val)
        return cls(**kw)


#: metric columns a results CSV carries: reading one back as scenarios ignores them
_OUTPUT_COLUMNS: set[str] = set()


def _coerce(name: str, typ: Any, val: str) -> Any:
    t = str(typ)
    try:
        if t.startswith("bool"):
            low = val.lower()
            if low in ("1", "true", "yes", "y", "on"):
                return True
            if low in ("0", "false", "no", "n", "off"):
                return False
            raise ValueError
        if t.startswith("int"):
            f = float(val)
            if f != int(f):
                raise ValueError
            return int(f)
        if t.startswith("float"):
            return float(val)
        if t.startswith("list"):
            return [v for v in val.replace(";", " ").split() if v]
    except ValueError:
        raise ConfigError(f"scenario column '{name}': {val!r} is not a valid {t.split(' ')[0]}") from None
    return val


# ---------------------------------------------------------------------------------------------------------
def _pos(name: str, v: int | None) -> None:
    if v is not None and v < 1:
        raise ConfigError(f"--{name.replace('_', '-')} must be >= 1 (got {v})")


def _validate(sc: Scenario) -> None:
    if not sc.model:
        raise ConfigError("--model is required (e.g. deepseek-r1; see `jalapeno models list`)")
    if not sc.hardware and not (sc.prefill_hardware and sc.decode_hardware):
        raise ConfigError("--hardware is required (e.g. h200; see `jalapeno hardware list`)")
    for n in ("tp", "ep", "pp", "dp", "isl", "osl", "concurrency", "num_prompts", "max_concurrency", "chain_calls",
              "prefill_workers", "prefill_tp", "prefill_ep", "decode_workers", "decode_tp", "decode_ep",
              "max_num_seqs", "max_num_batched_tokens", "block_size"):
        _pos(n, getattr(sc, n))
    if sc.precision not in PRECISIONS:
        raise ConfigError(f"--precision {sc.precision!r} must be one of {', '.join(PRECISIONS)}")
    if sc.kv_dtype not in ("bf16", "fp8"):
        raise ConfigError(f"--kv-dtype {sc.kv_dtype!r} must be bf16 or fp8")
    if sc.concurrency is None and sc.request_rate is None and sc.trace is None:
        raise ConfigError("give --concurrency N (closed loop) or --request-rate R (open loop)")
    if sc.request_rate is not None and not sc.request_rate > 0:
        raise ConfigError(f"--request-rate must be > 0 requests/s (got {sc.request_rate})")
    if sc.power_cap_w is not None and not sc.power_cap_w > 0:
        raise ConfigError(f"--power-cap-w must be > 0 watts (got {sc.power_cap_w})")
    if sc.spec_decode is not None and sc.spec_decode not in ("mtp", "draft", "ngram"):
        raise ConfigError(f"--spec-decode {sc.spec_decode!r} must be mtp, draft or ngram")


def _parse_acceptance(text: str | float, k: int) -> float | tuple[float, ...]:
    if isinstance(text, str) and (text.endswith(".json") or os.path.isfile(text)):
        from jalapeno.spec.proposer import read_acceptance_file

        return read_acceptance_file(text, k)
    parts = [p for p in str(text).replace(";", ",").split(",") if p.strip()]
    try:
        vals = tuple(float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"--acceptance {text!r}: give a rate in [0, 1] or one per draft token, comma-separated") from None
    if len(vals) == 1:
        return vals[0]
    if len(vals) != k:
        raise ConfigError(f"--acceptance lists {len(vals)} rates but --spec-tokens is {k}")
    return vals


def _cost_model(sc: Scenario, arch, hardware: str, tp: int, ep: int, dp_attention: bool):
    return cost_model_for(arch, hardware, tp=tp, ep=ep, pp=sc.pp, dp_attention=dp_attention,
                          precision=sc.precision, kv=sc.kv_dtype, framework=sc.framework,
                          hardware_dir=sc.hardware_dir, power_cap_w=sc.power_cap_w)


def _workload(sc: Scenario):
    import numpy as np

    from jalapeno.workload import Workload, inferencex_workload, load_trace

    if sc.trace:
        i, o, t = load_trace(sc.trace)
        if t is None and sc.concurrency is None and sc.request_rate is None:
            raise ConfigError("the trace has no arrival_s column: give --concurrency or --request-rate")
        if sc.chain_calls > 1:
            raise ConfigError("--chain-calls cannot be combined with --trace")
        if sc.concurrency is not None and t is None:
            return Workload(i, o, concurrency=sc.concurrency)
        if t is None:
            from jalapeno.workload import arrival_times

            t = arrival_times(i.size, sc.request_rate, distribution=sc.arrival, seed=sc.seed)  # type: ignore[arg-type]
        return Workload(i, o, arrival_s=np.asarray(t), max_concurrency=sc.max_concurrency or sc.concurrency)
    return inferencex_workload(
        sc.isl,
        sc.osl,
        concurrency=sc.concurrency if sc.request_rate is None else None,
        num_prompts=sc.num_prompts,
        range_ratio=sc.random_range_ratio,
        range_mode=sc.range_mode,  # type: ignore[arg-type]
        request_rate=sc.request_rate,
        arrival=sc.arrival,
        max_concurrency=sc.max_concurrency or (sc.concurrency if sc.request_rate is not None else None),
        chain_calls=sc.chain_calls,
        seed=sc.seed,
    )


def _kv_link(cm_p, cm_d):
    def side(cm) -> tuple[float, float]:
        chip = cm.chip
        link = chip.scale_out or chip.scale_up
        eff = cm.eff.scale_out if chip.scale_out is not None else cm.eff.scale_up
        holders = 1 if cm.parallel.dp_attention else cm.parallel.tp
        return float(link.bandwidth_gbps) * 1e9 * eff * holders, float(link.latency_us) * 1e-6

    (bw_p, lat_p), (bw_d, lat_d) = side(cm_p), side(cm_d)
    plan = cm_p.memory_plan()
    return KVLink(max(lat_p, lat_d), min(bw_p, bw_d), float(plan.kv_bytes_per_token),
                  float(plan.state_bytes_per_sequence))


def run_scenario(sc: Scenario, *, return_result: bool = False):
    """Simulate ``sc``; returns the metrics dict (and the :class:`SimResult` when ``return_result``)."""
    from jalapeno.hardware.confidence import confidence
    from jalapeno.metrics import SLO
    from jalapeno.models import load_model

    _validate(sc)
    arch = load_model(sc.model)
    wl = _workload(sc)
    slo = SLO.parse(sc.goodput) if sc.goodput else None

    def spec_for(cm):
        if not sc.spec_decode:
            return None
        if sc.spec_decode == "mtp" and not arch.mtp_layers:
            raise ConfigError(f"--spec-decode mtp: {arch.name} has no MTP layers; use draft or ngram")
        draft = None
        if sc.spec_decode == "draft":
            if not sc.draft_model:
                raise ConfigError("--spec-decode draft needs --draft-model (e.g. llama-3.1-8b)")
            d_arch = load_model(sc.draft_model)
            draft = _cost_model(sc, d_arch, cm.chip.key, cm.parallel.tp if d_arch.num_heads % cm.parallel.tp == 0 else 1, 1, False)
        return SpecDecode(sc.spec_decode, sc.spec_tokens, _parse_acceptance(sc.acceptance, sc.spec_tokens), draft)  # type: ignore[arg-type]

    in_flight = sc.concurrency or sc.max_concurrency or DEFAULT_MIN_NUM_SEQS
    limits = SimLimits(sc.max_num_seqs, sc.max_num_batched_tokens, sc.block_size)
    if not sc.disaggregated:
        cm = _cost_model(sc, arch, sc.hardware, sc.tp, sc.ep, sc.dp_attention)
        replicas = 1 if sc.dp_attention else sc.dp
        engines = build_sim_engines(cm, replicas, spec=spec_for(cm), limits=limits, in_flight=in_flight)
        target = engines[0] if replicas == 1 else Cluster(engines)
        result = run_workload(target, wl)
        num_chips = cm.chips_per_replica * replicas
        output_chips = None
        kv_tokens = engines[0].block_manager.num_blocks * sc.block_size
        roles = [("serving", cm.chip)]
    else:
        cm_p = _cost_model(sc, arch, sc.prefill_hardware or sc.hardware, sc.prefill_tp or sc.tp,
                           sc.prefill_ep or sc.ep, sc.dp_attention)
        cm_d = _cost_model(sc, arch, sc.decode_hardware or sc.hardware, sc.decode_tp or sc.tp,
                           sc.decode_ep or sc.ep, sc.dp_attention)
        n_p, n_d = sc.prefill_workers or 1, sc.decode_workers or 1
        pre = build_sim_engines(cm_p, n_p, limits=limits, in_flight=in_flight)
        dec = build_sim_engines(cm_d, n_d, spec=spec_for(cm_d), limits=limits, in_flight=in_flight)
        result = run_workload(Cluster(pre, dec, _kv_link(cm_p, cm_d)), wl)
        output_chips = n_d * cm_d.chips_per_replica
        num_chips = n_p * cm_p.chips_per_replica + output_chips
        engines = pre + dec
        kv_tokens = dec[0].block_manager.num_blocks * sc.block_size
        roles = [("prefill", cm_p.chip), ("decode", cm_d.chip)]
    m = result.metrics(num_chips=num_chips, output_chips=output_chips, slo=slo)
    m["sim"] = {
        "steps": result.num_steps,
        "preemptions": sum(e.stats.num_preemptions for e in engines),
        "kv_capacity_tokens_per_replica": kv_tokens,
        "energy_j": result.energy_j,
    }
    m["confidence"] = confidence(roles)
    return (m, result) if return_result else m


def flat(m: dict) -> dict:
    """The metrics dict with nested dicts flattened as ``sim_steps`` etc. (for CSV); the ``confidence`` object
    becomes ``confidence`` (its label), ``confidence_status``, ``confidence_points`` and
    ``confidence_median_error_pct`` (the label names each chip when a disaggregated run has two)."""
    out: dict = {}
    for key, v in m.items():
        if key == "confidence" and isinstance(v, dict):
            out["confidence"] = v["label"]
            out.update({f"confidence_{a}": v[a] for a in ("status", "points", "median_error_pct")})
        elif isinstance(v, dict):
            out.update({f"{key}_{a}": b for a, b in v.items()})
        else:
            out[key] = v
    return out
