"""``jalapeno simulate``: one serving scenario (model × hardware × parallelism × workload) → InferenceX metrics.

:class:`Scenario` holds the choices under the CLI's flag names (so a scenarios CSV uses the same names as
columns); :func:`run_scenario` builds the cost model(s), the simulated engine(s) and the workload, runs it on
the virtual clock and returns the metrics dict (``jalapeno.metrics`` keys, plus chain latencies when chained).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, replace, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jalapeno.errors import ConfigError
from jalapeno.perf.types import KV_PRECISIONS, WEIGHT_PRECISIONS
from jalapeno.sim.backend import Speculation
from jalapeno.sim.client import run_workload
from jalapeno.sim.cluster import Cluster, KVLink
from jalapeno.sim.factory import DEFAULT_MIN_NUM_SEQS, CostModelCache, SimLimits, build_sim_engines, cost_model_for

if TYPE_CHECKING:  # pragma: no cover
    from jalapeno.speculative.proposer import MeasuredAcceptance

#: per-pool scenario fields: ``prefill_<x>`` / ``decode_<x>`` (setting any makes the run disaggregated)
POOL_FIELDS = ("hardware", "workers", "tp", "ep", "pp", "chips_per_worker", "dp_attention", "precision")


@dataclass(frozen=True)
class PoolSpec:
    """One disaggregated pool after resolution: ``workers`` engines, each on ``tp·pp`` chips of ``hardware``."""

    role: str  # "prefill" | "decode"
    hardware: str
    workers: int
    tp: int
    ep: int
    pp: int
    dp_attention: bool
    precision: str

    @property
    def chips_per_worker(self) -> int:
        return self.tp * self.pp


def _pool(sc: "Scenario", role: str) -> PoolSpec:
    def get(x: str):
        return getattr(sc, f"{role}_{x}")

    flag = f"--{role}-"
    pp = get("pp") or sc.pp
    dpa = sc.dp_attention if get("dp_attention") is None else bool(get("dp_attention"))
    tp = get("tp") or sc.tp
    chips = get("chips_per_worker")
    if chips is not None:
        if chips % pp:
            raise ConfigError(f"{flag}chips-per-worker {chips} is not a multiple of the pool's pp={pp}")
        tp = chips // pp
        given = get("tp")
        # with dp-attention a recorded TP is the attention TP inside one DP rank: the cost model prices TP 1
        if given is not None and given != tp and not (dpa and given == 1):
            raise ConfigError(
                f"{flag}tp {given} and {flag}chips-per-worker {chips} disagree: a worker's chips are its tp·pp "
                f"(= {chips}); drop {flag}tp" + ("" if dpa else f" or set it to {tp}"))
    return PoolSpec(role, get("hardware") or sc.hardware, get("workers") or 1, tp, get("ep") or sc.ep, pp, dpa,
                    get("precision") or sc.precision)


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
    # disaggregated pools: each field overrides the global one for its pool (None: the global value)
    prefill_hardware: str | None = None
    prefill_workers: int | None = None
    prefill_tp: int | None = None
    prefill_ep: int | None = None
    prefill_pp: int | None = None
    #: chips one prefill worker spans (its tp·pp; with dp-attention the attention is data-parallel over them)
    prefill_chips_per_worker: int | None = None
    prefill_dp_attention: bool | None = None
    prefill_precision: str | None = None
    decode_hardware: str | None = None
    decode_workers: int | None = None
    decode_tp: int | None = None
    decode_ep: int | None = None
    decode_pp: int | None = None
    decode_chips_per_worker: int | None = None
    decode_dp_attention: bool | None = None
    decode_precision: str | None = None
    chain_calls: int = 1
    goodput: list[str] = field(default_factory=list)
    seed: int = 0
    #: statistical early stop (opt-in): the relative tolerance of the latency statistics' 95 % CIs
    #: (jalapeno.sim.early_stop); None = InferenceX-exact, every prompt sent
    early_stop: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    trace: str | None = None
    hardware_dir: list[str] = field(default_factory=list)
    #: serving-framework profile (jalapeno.perf.frameworks: vllm | sglang | trt-llm): its per-request front-end
    #: latency replaces the chip's generic ``efficiency.request_overhead_ms``; None keeps the chip's. An
    #: aggregated run also takes the stack's scheduling policy (SGLang: prefill batches run alone)
    framework: str | None = None
    #: disaggregated: fixed per-request prefill -> decode handoff latency (ms) on the KV link; None = the
    #: framework profile's (a disaggregated stack such as dynamo-trt carries a fitted value; engines 0)
    kv_handoff_ms: float | None = None
    #: disaggregated: decode-loop iterations (each the receiving worker's decode step) a request waits for its
    #: first token beyond the step in progress when its KV lands; None = the framework profile's (SGLang stacks:
    #: 3, counted from the source; engines 0)
    decode_first_token_steps: float | None = None
    #: SGLang's ``--scheduler-recv-interval`` (decode steps between polls for new requests; InferenceX's B200
    #: SGLang scripts launch with 30 at concurrency >= 16, else 10); None = the --framework profile's (1)
    scheduler_recv_interval: int | None = None
    #: TensorRT-LLM attention-DP context balancing (``attention_dp_config: enable_balance: true, timeout_iters: N``;
    #: every InferenceX TRT-LLM script with attention DP uses 60): the steps a partial set of new requests is held
    #: while every attention-DP rank decodes; None = off (TensorRT-LLM's default)
    attention_dp_balance: int | None = None
    #: disaggregated: the prefill server's time per prompt token beyond the cost model (ns), added to the prefill
    #: pool's ``efficiency.prefill_token_overhead_ns``; None = the framework profile's (a fitted stack value)
    prefill_token_ns: float | None = None
    #: disaggregated: per MoE layer of a decode step of a dp-attention decode pool with EP > 1, the expert
    #: all-to-all's fixed cost beyond the cost model (us), added to its ``moe_layer_overhead_us``; None = the
    #: framework profile's (a fitted stack value)
    dpa_decode_moe_layer_us: float | None = None
    #: disaggregated: most sequences one decode worker holds (SGLang --max-running-requests, TRT-LLM
    #: max_batch_size); a prefilled request waits for a slot before its KV is sent. None = --max-num-seqs
    decode_max_num_seqs: int | None = None
    #: disaggregated: how the router picks each request's prefill and decode worker: "least-loaded" (the one
    #: with the fewest requests; a prefilled request goes to any decode worker with room) or "random" (SGLang's
    #: PD router with --prefill-policy/--decode-policy random, as the InferenceX MI355X recipes launch it; a
    #: request waits for room in its own decode worker). None = the framework profile's (least-loaded)
    routing: str | None = None
    #: power cap in watts: clocks lowered until the modelled power fits (jalapeno.hardware.power_cap); None = rated
    power_cap_w: float | None = None
    #: GB of each chip's SRAM that holds KV blocks (the fastest KV tier; 0 = KV in main memory)
    kv_sram_gb: float = 0.0
    #: KV offload tier for preempted sequences: host:GB[:GBPS] or ssd:GB:GBPS per chip (None = recompute)
    kv_offload: str | None = None
    #: the chips' hardware features (verify unit, on-chip KV page table) on, or off to study what they buy
    chip_features: bool = True
    #: the serving stack's memory fraction (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static,
    #: TensorRT-LLM free_gpu_memory_fraction, under the --framework's rule; jalapeno.perf.types.MemoryRule);
    #: None = the framework's default (no framework: vLLM's 0.9 of the total)
    memory_fraction: float | None = None

    @property
    def disaggregated(self) -> bool:
        return any(
            getattr(self, f"{p}_{x}") is not None
            for p in ("prefill", "decode")
            for x in POOL_FIELDS
        )

    def pool(self, role: str) -> "PoolSpec":
        """The resolved layout of the ``prefill`` or ``decode`` pool (per-pool fields over the global ones)."""
        return _pool(self, role)

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
              *(f"{r}_{x}" for r in ("prefill", "decode") for x in ("workers", "tp", "ep", "pp", "chips_per_worker")),
              "max_num_seqs", "decode_max_num_seqs", "max_num_batched_tokens", "block_size"):
        _pos(n, getattr(sc, n))
    for n in ("precision", "prefill_precision", "decode_precision"):
        v = getattr(sc, n)
        if v is not None and v not in WEIGHT_PRECISIONS:
            raise ConfigError(f"--{n.replace('_', '-')} {v!r} must be one of {', '.join(WEIGHT_PRECISIONS)}")
    if sc.dp_attention and sc.dp > 1 and sc.dp != sc.tp:
        raise ConfigError(
            f"--dp {sc.dp} with --dp-attention: dp counts the attention replicas inside one engine (SGLang's "
            f"--dp), which run over its tp={sc.tp} chips; give --dp {sc.tp} (or --dp 1), or set --tp {sc.dp}")
    if sc.disaggregated and sc.dp > 1 and not sc.dp_attention:
        raise ConfigError(f"--dp {sc.dp} does not apply to a disaggregated run; give --prefill-workers / --decode-workers")
    if sc.memory_fraction is not None and not 0.0 < sc.memory_fraction <= 1.0:
        raise ConfigError(f"--memory-fraction {sc.memory_fraction:g} is outside (0, 1]: the share of each chip's memory "
                          "the serving stack may use (vLLM 0.9, SGLang mem_fraction_static, TensorRT-LLM "
                          "free_gpu_memory_fraction)")
    if sc.kv_dtype not in KV_PRECISIONS:
        raise ConfigError(f"--kv-dtype {sc.kv_dtype!r} must be one of {', '.join(KV_PRECISIONS)}")
    if sc.concurrency is None and sc.request_rate is None and sc.trace is None:
        raise ConfigError("give --concurrency N (closed loop) or --request-rate R (open loop)")
    if sc.request_rate is not None and not sc.request_rate > 0:
        raise ConfigError(f"--request-rate must be > 0 requests/s (got {sc.request_rate})")
    if sc.scheduler_recv_interval is not None:
        if not sc.scheduler_recv_interval >= 1:
            raise ConfigError(f"--scheduler-recv-interval must be >= 1 decode steps (got {sc.scheduler_recv_interval})")
        if not sc.framework or sc.disaggregated:
            raise ConfigError("--scheduler-recv-interval applies to an aggregated run with a --framework profile "
                              "(e.g. --framework sglang); drop it or add --framework")
    if sc.attention_dp_balance is not None:
        if not sc.attention_dp_balance >= 1:
            raise ConfigError(f"--attention-dp-balance must be >= 1 steps (got {sc.attention_dp_balance})")
        if not sc.framework or sc.disaggregated or not sc.dp_attention or sc.tp < 2:
            raise ConfigError("--attention-dp-balance applies to an aggregated --framework run with --dp-attention over "
                              "--tp >= 2 ranks (e.g. --framework trt-llm --tp 8 --ep 8 --dp-attention); drop it or add them")
    if sc.kv_handoff_ms is not None and not sc.kv_handoff_ms >= 0:
        raise ConfigError(f"--kv-handoff-ms must be >= 0 milliseconds (got {sc.kv_handoff_ms})")
    if sc.decode_first_token_steps is not None:
        if not sc.decode_first_token_steps >= 0:
            raise ConfigError(f"--decode-first-token-steps must be >= 0 decode steps (got {sc.decode_first_token_steps})")
        if not sc.disaggregated:
            raise ConfigError("--decode-first-token-steps applies to a disaggregated run (prefill/decode pools); drop it "
                              "or add --prefill-workers / --decode-workers")
    if sc.dpa_decode_moe_layer_us is not None and not sc.dpa_decode_moe_layer_us >= 0:
        raise ConfigError(f"--dpa-decode-moe-layer-us must be >= 0 microseconds (got {sc.dpa_decode_moe_layer_us})")
    if sc.prefill_token_ns is not None and not sc.prefill_token_ns >= 0:
        raise ConfigError(f"--prefill-token-ns must be >= 0 nanoseconds (got {sc.prefill_token_ns})")
    if sc.routing is not None:
        from jalapeno.sim.cluster import ROUTING

        if sc.routing not in ROUTING:
            raise ConfigError(f"--routing {sc.routing!r} must be one of {', '.join(ROUTING)}")
        if not sc.disaggregated:
            raise ConfigError("--routing applies to a disaggregated run (prefill/decode pools); drop it or add "
                              "--prefill-workers / --decode-workers")
    if sc.power_cap_w is not None and not sc.power_cap_w > 0:
        raise ConfigError(f"--power-cap-w must be > 0 watts (got {sc.power_cap_w})")
    if sc.spec_decode is not None and sc.spec_decode not in ("mtp", "draft", "ngram"):
        raise ConfigError(f"--spec-decode {sc.spec_decode!r} must be mtp, draft or ngram")


def _parse_acceptance(text: str | float, k: int) -> "float | tuple[float, ...] | MeasuredAcceptance":
    """Rates given inline, or a measured run's file (``generate --json`` / ``bench --json``)."""
    if isinstance(text, str) and (text.endswith(".json") or os.path.isfile(text)):
        from jalapeno.speculative.proposer import read_acceptance_file

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


def _cost_model(sc: Scenario, arch, hardware: str, tp: int, ep: int, dp_attention: bool, *,
                pp: int | None = None, precision: str | None = None, efficiency=None,
                cache: CostModelCache | None = None):
    """The scenario's cost model of one replica on ``hardware`` (from ``cache`` when one is given)."""
    build = cost_model_for if cache is None else cache.get
    return build(arch, hardware, tp=tp, ep=ep, pp=sc.pp if pp is None else pp, dp_attention=dp_attention,
                 precision=precision or sc.precision, kv=sc.kv_dtype, framework=sc.framework,
                 hardware_dir=sc.hardware_dir, power_cap_w=sc.power_cap_w, efficiency=efficiency,
                 kv_sram_gb=sc.kv_sram_gb, kv_offload=sc.kv_offload, chip_features=sc.chip_features,
                 memory_fraction=sc.memory_fraction)


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


def _check_context(wl, ctx: int, name: str) -> None:
    """Refuse a workload whose longest call (prompt + output; a chain's last call carries the whole chain)
    does not fit the model's context, as a real server would refuse the request."""
    import numpy as np

    n = wl.chain_calls
    totals = (wl.input_lens + wl.output_lens).reshape(-1, n).sum(axis=1) if n > 1 else wl.input_lens + wl.output_lens
    longest = int(np.max(totals)) if totals.size else 0
    if longest > ctx:
        raise ConfigError(
            f"the longest request has {longest} tokens (prompt + output), beyond {name}'s context of {ctx}: "
            "lower --isl/--osl (or the trace's lengths)"
        )


def routing(sc: Scenario) -> str:
    """How the disaggregated cluster routes requests: ``--routing``, else the stack's router
    (:func:`jalapeno.perf.frameworks.router_policy`)."""
    from jalapeno.perf.frameworks import router_policy

    return sc.routing if sc.routing is not None else router_policy(sc.framework)


def first_token_steps(sc: Scenario) -> float:
    """Decode-loop iterations before a disaggregated request's first token beyond the step in progress: the
    scenario's, else its stack's (:func:`jalapeno.perf.frameworks.first_token_steps`)."""
    from jalapeno.perf.frameworks import first_token_steps as stack_steps

    return float(sc.decode_first_token_steps) if sc.decode_first_token_steps is not None else stack_steps(sc.framework)


def handoff_ms(sc: Scenario) -> float:
    from jalapeno.perf.frameworks import kv_handoff_ms

    return float(sc.kv_handoff_ms) if sc.kv_handoff_ms is not None else kv_handoff_ms(sc.framework)


def _stack_fitted_on(sc: Scenario, hardware: str | None, decode_a2a: bool = False) -> bool:
    """Whether the scenario's disaggregated stack has its per-pool fitted terms for the chip ``hardware``
    (``ServingFramework.fitted_chips``: the chip families whose rows they were fitted on); ``decode_a2a``: its
    dp-attention decode all-to-all term, which also reaches the vendors in ``dpa_decode_vendors``."""
    from jalapeno.hardware import get_chip
    from jalapeno.perf.frameworks import get_framework

    fw = get_framework(sc.framework)
    if not fw.fitted_chips or not hardware:
        return True
    chip = get_chip(hardware, list(sc.hardware_dir)) if sc.hardware_dir else get_chip(hardware)
    return fw.dpa_decode_on(chip) if decode_a2a else fw.fitted_on(chip)


def prefill_token_ns(sc: Scenario) -> float:
    """The disaggregated prefill server's extra time per prompt token (ns): the scenario's, else its stack's for
    the prefill pool's weight precision, where the stack was fitted on the prefill pool's chip family; a prefill
    pool with expert parallelism and no dp-attention takes the stack's ``prefill_ep_token_ns`` where it has one
    (:func:`jalapeno.perf.frameworks.prefill_token_ns`)."""
    from jalapeno.perf.frameworks import prefill_token_ns as stack_value

    if sc.prefill_token_ns is not None:
        return float(sc.prefill_token_ns)
    if not sc.disaggregated or not sc.framework or not _stack_fitted_on(sc, sc.prefill_hardware or sc.hardware):
        return 0.0
    q = sc.pool("prefill")
    return stack_value(sc.framework, sc.prefill_precision or sc.precision, ep_only=q.ep > 1 and not q.dp_attention)


def _pool_model(sc: Scenario, arch, q: "PoolSpec", efficiency=None, extras: dict[str, float] | None = None,
                sets: dict[str, float] | None = None, cache: CostModelCache | None = None):
    """A pool's cost model: the chip's (or ``efficiency``), with each positive ``extras`` value added to the
    efficiency field it names (a disaggregated stack's fitted terms for this pool) and the ``sets`` fields set."""
    cm = _cost_model(sc, arch, q.hardware, q.tp, q.ep, q.dp_attention, pp=q.pp, precision=q.precision,
                     efficiency=efficiency, cache=cache)
    upd = {f: getattr(cm.eff, f) + v for f, v in (extras or {}).items() if v > 0}
    upd.update({f: v for f, v in (sets or {}).items() if getattr(cm.eff, f) != v})
    if not upd:
        return cm
    eff = cm.eff.model_copy(update=upd)
    return _cost_model(sc, arch, q.hardware, q.tp, q.ep, q.dp_attention, pp=q.pp, precision=q.precision,
                       efficiency=eff, cache=cache)


def _prefill_pool_model(sc: Scenario, arch, q: "PoolSpec", efficiency=None, cache: CostModelCache | None = None):
    """The prefill pool's cost model, plus the stack's per-prompt-token prefill cost (:func:`prefill_token_ns`)
    on ``prefill_token_overhead_ns``. That cost REPLACES the chip's front-end time per prompt token
    (``request_overhead_us_per_token``, fitted on aggregated rows where it stood in for prefill-server time the
    cost model misses): the prefill server's per-token time is then priced once, in the pool where it also
    bounds the request rate; the front end keeps its fixed latency."""
    ns = prefill_token_ns(sc)
    return _pool_model(sc, arch, q, efficiency, {"prefill_token_overhead_ns": ns},
                       {"request_overhead_us_per_token": 0.0} if ns > 0 else None, cache)


def dpa_decode_moe_layer_us(sc: Scenario) -> float:
    """The dp-attention decode pool's extra per-MoE-layer all-to-all cost (us): the scenario's, else its stack's."""
    from jalapeno.perf.frameworks import dpa_decode_moe_layer_us as stack_value

    v = sc.dpa_decode_moe_layer_us
    if v is not None:
        return float(v)
    if not sc.framework or not _stack_fitted_on(sc, sc.decode_hardware or sc.hardware, decode_a2a=True):
        return 0.0
    return stack_value(sc.framework)


def _decode_pool_model(sc: Scenario, arch, q: "PoolSpec", efficiency=None, cache: CostModelCache | None = None):
    """The decode pool's cost model; with dp-attention and EP > 1, plus the stack's per-MoE-layer all-to-all
    cost (:func:`dpa_decode_moe_layer_us`) on ``moe_layer_overhead_us``."""
    extra = dpa_decode_moe_layer_us(sc) if q.dp_attention and q.ep > 1 else 0.0
    return _pool_model(sc, arch, q, efficiency, {"moe_layer_overhead_us": extra}, cache=cache)


def decode_max_num_seqs(sc: Scenario, q: "PoolSpec") -> int | None:
    """Sequence slots of one decode worker: ``--decode-max-num-seqs``, else the disaggregated stack's recipe value
    for the pool's layout (:func:`jalapeno.perf.frameworks.decode_max_running_requests`), else None (the engine's
    ``--max-num-seqs``)."""
    if sc.decode_max_num_seqs is not None:
        return int(sc.decode_max_num_seqs)
    from jalapeno.perf.frameworks import decode_max_running_requests

    return decode_max_running_requests(sc.framework, q.chips_per_worker, q.ep, q.dp_attention)


def prefill_limits(sc: Scenario, limits: SimLimits) -> SimLimits:
    """The prefill pool's scheduler limits: a disaggregated stack's prefill servers are its engine's servers, so
    they batch prompts under that engine's scheduling policy (SGLang: a prefill batch takes prompts up to
    ``max_prefill_tokens``, 16384 by default, and runs alone; the InferenceX MI355X recipes raise
    ``--chunked-prefill-size`` to 262144 and leave ``--max-prefill-tokens`` at its default). No framework: the
    engine scheduler's default (``max_num_batched_tokens`` per step). The decode pool keeps the default limits."""
    if not sc.framework:
        return limits
    from jalapeno.perf.frameworks import scheduling_policy

    return replace(limits, scheduling=scheduling_policy(sc.framework))


def _kv_link(cm_p, cm_d, n_p: int, n_d: int, handoff_s: float = 0.0) -> KVLink:
    """The link the KV cache crosses between the pools: the scale-up fabric (NVLink) when both pools are one
    chip type inside one scale-up domain (GB200 NVL72: ``domain_size`` 72 ≥ all their chips), else the
    scale-out NIC. One copy of a sequence's KV (and a hybrid model's linear-attention state) moves (MLA's
    latent is replicated on every tp rank: one copy);
    the chips holding distinct shards of it send (receive) in parallel: ``min(tp, KV heads)`` per stage, 1
    with dp-attention, where each chip holds whole sequences. A worker moves one transfer at a time per group
    of such chips: one lane, or tp lanes with dp-attention."""
    from jalapeno.perf.ops import attention_dims, kv_bytes_per_token_per_layer, linear_state_bytes_per_layer

    total = n_p * cm_p.chips_per_replica + n_d * cm_d.chips_per_replica
    up = cm_p.chip.scale_up
    same_domain = cm_p.chip.key == cm_d.chip.key and up.domain_size > 0 and total <= up.domain_size
    fabric = "scale-up" if same_domain or cm_p.chip.scale_out is None or cm_d.chip.scale_out is None else "scale-out"
    m = cm_p.model
    one_copy = kv_bytes_per_token_per_layer(m, attention_dims(m, 1, False), cm_p.kv_bytes_per_element)

    def side(cm) -> tuple[float, float, int]:
        link = cm.chip.scale_up if fabric == "scale-up" else cm.chip.scale_out
        eff = cm.eff.scale_up if fabric == "scale-up" else cm.eff.scale_out
        par = cm.parallel
        shard = kv_bytes_per_token_per_layer(m, attention_dims(m, par.tp, par.dp_attention), cm.kv_bytes_per_element)
        holders = max(1, round(one_copy / shard)) * par.pp
        lanes = par.tp if par.dp_attention else 1
        return float(link.bandwidth_gbps) * 1e9 * eff * holders, float(link.latency_us) * 1e-6, lanes

    (bw_p, lat_p, lanes_p), (bw_d, lat_d, lanes_d) = side(cm_p), side(cm_d)
    d1 = attention_dims(m, 1, False)
    state = linear_state_bytes_per_layer(m, d1) * m.num_linear_layers  # one copy of a hybrid model's state
    return KVLink(max(lat_p, lat_d), min(bw_p, bw_d), one_copy * (m.num_layers - m.num_linear_layers), state,
                  send_lanes=lanes_p, recv_lanes=lanes_d, fabric=fabric, handoff_s=handoff_s)


def run_scenario(sc: Scenario, *, return_result: bool = False, efficiency=None,
                 cost_models: CostModelCache | None = None):
    """Simulate ``sc``; returns the metrics dict (and the :class:`SimResult` when ``return_result``).
    ``efficiency`` (an :class:`~jalapeno.hardware.schema.Efficiency`) replaces the chips' efficiency blocks
    (what calibration searches); ``sc.framework`` still sets its request latency over it. ``cost_models``: a
    cache the cost models come from (a sweep's, shared by its points: the same results, built once)."""
    from jalapeno.hardware.confidence import confidence
    from jalapeno.metrics import SLO
    from jalapeno.models import load_model

    _validate(sc)
    arch = load_model(sc.model)
    wl = _workload(sc)
    _check_context(wl, int(arch.max_position_embeddings), arch.name)
    slo = SLO.parse(sc.goodput) if sc.goodput else None
    stop = None
    if sc.early_stop is not None:
        from jalapeno.sim.early_stop import EarlyStop

        stop = EarlyStop(float(sc.early_stop))

    def speculation_for(cm):
        if not sc.spec_decode:
            return None
        if sc.spec_decode == "mtp" and not arch.mtp_layers:
            raise ConfigError(f"--spec-decode mtp: {arch.name} has no MTP layers; use draft or ngram")
        draft = None
        if sc.spec_decode == "draft":
            if not sc.draft_model:
                raise ConfigError("--spec-decode draft needs --draft-model (e.g. llama-3.1-8b)")
            d_arch = load_model(sc.draft_model)
            draft = _cost_model(sc, d_arch, cm.chip.key, cm.parallel.tp if d_arch.num_heads % cm.parallel.tp == 0 else 1, 1, False,
                                cache=cost_models)
        from jalapeno.speculative.proposer import KPolicy, MeasuredAcceptance  # only a speculating run loads it

        acc = _parse_acceptance(sc.acceptance, sc.spec_tokens)
        if isinstance(acc, MeasuredAcceptance):  # a measured run: the engine's adaptive k, its draft rate
            return Speculation(sc.spec_decode, sc.spec_tokens, acc.chain, draft,  # type: ignore[arg-type]
                               policy=KPolicy(sc.spec_tokens), draft_rate=acc.draft_rate, seed=sc.seed)
        return Speculation(sc.spec_decode, sc.spec_tokens, acc, draft)  # type: ignore[arg-type]

    in_flight = sc.concurrency or sc.max_concurrency or DEFAULT_MIN_NUM_SEQS
    limits = SimLimits(sc.max_num_seqs, sc.max_num_batched_tokens, sc.block_size)
    if not sc.disaggregated:
        cm = _cost_model(sc, arch, sc.hardware, sc.tp, sc.ep, sc.dp_attention, efficiency=efficiency,
                         cache=cost_models)
        replicas = 1 if sc.dp_attention else sc.dp
        if sc.framework:  # the stack's prefill scheduling (SGLang: prefill batches alone); aggregated runs only
            from jalapeno.perf.frameworks import scheduling_policy

            policy = scheduling_policy(sc.framework)
            if sc.scheduler_recv_interval is not None:
                policy = replace(policy, recv_interval=int(sc.scheduler_recv_interval))
            if sc.attention_dp_balance is not None:  # one attention-DP rank per tensor-parallel chip
                policy = replace(policy, balance_ranks=sc.tp, balance_timeout_iters=int(sc.attention_dp_balance))
            limits = replace(limits, scheduling=policy)
        engines = build_sim_engines(cm, replicas, speculation=speculation_for(cm), limits=limits, in_flight=in_flight)
        target = engines[0] if replicas == 1 else Cluster(engines)
        result = run_workload(target, wl, stop)
        num_chips = cm.chips_per_replica * replicas
        output_chips = None
        kv_tokens = engines[0].block_manager.num_blocks * sc.block_size
        roles = [("serving", cm.chip)]
    else:
        pp_, dp_ = sc.pool("prefill"), sc.pool("decode")
        cm_p = _prefill_pool_model(sc, arch, pp_, efficiency, cost_models)
        cm_d = _decode_pool_model(sc, arch, dp_, efficiency, cost_models)
        n_p, n_d = pp_.workers, dp_.workers
        pre = build_sim_engines(cm_p, n_p, limits=prefill_limits(sc, limits), in_flight=in_flight)
        dec_limits = replace(limits, max_num_seqs=decode_max_num_seqs(sc, dp_) or limits.max_num_seqs)
        dec = build_sim_engines(cm_d, n_d, speculation=speculation_for(cm_d), limits=dec_limits, in_flight=in_flight)
        link = _kv_link(cm_p, cm_d, n_p, n_d, handoff_ms(sc) * 1e-3)
        target = Cluster(pre, dec, link, routing=routing(sc), seed=sc.seed, first_token_steps=first_token_steps(sc))
        result = run_workload(target, wl, stop)
        output_chips = n_d * cm_d.chips_per_replica
        num_chips = n_p * cm_p.chips_per_replica + output_chips
        engines = pre + dec
        kv_tokens = dec[0].block_manager.num_blocks * sc.block_size
        roles = [("prefill", cm_p.chip), ("decode", cm_d.chip)]
    m = result.metrics(num_chips=num_chips, output_chips=output_chips, slo=slo)
    if sc.disaggregated:
        m["kv_transfer"] = {"fabric": link.fabric, "gb_per_s": link.bytes_per_s / 1e9,
                            "send_lanes": link.send_lanes, "recv_lanes": link.recv_lanes,
                            "mean_queue_ms": target.kv_queue_s_mean() * 1e3, "handoff_ms": link.handoff_s * 1e3,
                            "mean_admission_wait_ms": target.admission_wait_s_mean() * 1e3,
                            "mean_decode_step_wait_ms": target.step_wait_s_mean() * 1e3,
                            "first_token_steps": target.first_token_steps,
                            "decode_max_num_seqs": dec[0].config.max_num_seqs, "routing": target.routing,
                            "prefill_token_ns": prefill_token_ns(sc),
                            "dpa_decode_moe_layer_us": dpa_decode_moe_layer_us(sc) if dp_.dp_attention and dp_.ep > 1
                            else 0.0}
    m["sim"] = {
        "steps": result.num_steps,
        "preemptions": sum(e.stats.num_preemptions for e in engines),
        "kv_capacity_tokens_per_replica": kv_tokens,
        "energy_j": result.energy_j,
    }
    if "early_stop" in result.extra:
        m["early_stop"] = result.extra["early_stop"]
    if sc.kv_offload:
        m["sim"]["kv_offloads"] = sum(e.block_manager.num_offloads for e in engines)
        m["sim"]["kv_loaded_tokens"] = sum(e.block_manager.loaded_tokens for e in engines)
        m["sim"]["kv_offload_capacity_tokens_per_replica"] = engines[-1].block_manager.offload_blocks * sc.block_size
        m["sim"]["kv_reused_tokens"] = sum(e.block_manager.reused_tokens for e in engines)
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
