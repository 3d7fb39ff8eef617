"""The one way to build simulated engines: cost model → :class:`~jalapeno.sim.backend.SimBackend` → ``Engine``.

Every caller that simulates (``jalapeno simulate``, sweeps, ``bench --compare-sim``, the server's sim backend,
calibration, the Jalapeño study) builds its engines here, so their scheduler limits come from one set of
defaults (:class:`SimLimits`) and their results agree even where a limit binds. (vLLM's
``EngineArgs.create_engine_config()`` plays this role there.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from jalapeno.engine.config import EngineConfig
from jalapeno.engine.engine import Engine
from jalapeno.errors import ConfigError
from jalapeno.sim.backend import CostModelLike, SimBackend, Speculation

if TYPE_CHECKING:
    from jalapeno.hardware.schema import ChipSpec, Efficiency
    from jalapeno.models.arch import ModelArch
    from jalapeno.perf.frameworks import SchedulingPolicy
    from jalapeno.perf.model import CostModel

#: sequences a simulated engine may run at once when the caller names no limit: at least this many, and at
#: least the workload's requests in flight (so a closed-loop benchmark is never capped by the engine)
DEFAULT_MIN_NUM_SEQS = 1024


def cost_model_for(
    model: "str | ModelArch",
    hardware: "str | ChipSpec",
    *,
    tp: int = 1,
    ep: int = 1,
    pp: int = 1,
    dp_attention: bool = False,
    precision: str = "native",
    kv: str = "bf16",
    efficiency: "Efficiency | None" = None,
    framework: str | None = None,
    hardware_dir: Iterable[str] | None = None,
    sram_pinning: bool | None = None,
    power_cap_w: float | None = None,
    kv_sram_gb: float = 0.0,
    kv_offload: str | None = None,
    chip_features: bool = True,
    memory_fraction: float | None = None,
) -> "CostModel":
    """The cost model of one replica: catalogue ``model`` (or a :class:`ModelArch`) on ``tp·pp`` chips of
    ``hardware`` (a catalogue key, or a :class:`ChipSpec`). ``efficiency`` replaces the chip's efficiency
    block; ``framework`` (``vllm | sglang | trt-llm``) then applies that serving framework's request latency;
    ``power_cap_w`` caps each chip (clocks lowered until the modelled power fits: ``hardware.power_cap``).
    KV tiers: ``kv_sram_gb`` of each chip's SRAM holds KV (the fastest tier); ``kv_offload`` (``host:GB[:GBPS]``
    or ``ssd:GB:GBPS``) adds an offload tier preempted sequences' KV moves to. ``chip_features=False`` switches
    the chip's hardware features off (``ChipFeatures``: verify unit, on-chip KV page table). Main memory is budgeted
    by the framework's memory rule (vLLM ``gpu_memory_utilization``, SGLang ``mem_fraction_static``, TensorRT-LLM
    ``free_gpu_memory_fraction``: :func:`jalapeno.perf.frameworks.memory_rule`), its fraction replaced by
    ``memory_fraction`` when given; without a framework, vLLM's rule at 0.9 (or ``memory_fraction``)."""
    from jalapeno.hardware import get_chip
    from jalapeno.models import load_model
    from jalapeno.perf import CostModel, KVTier, Parallelism, Precision

    arch = load_model(model) if isinstance(model, str) else model
    if isinstance(hardware, str):
        chip = get_chip(hardware, list(hardware_dir)) if hardware_dir else get_chip(hardware)
    else:
        chip = hardware
    if power_cap_w is not None:
        from jalapeno.hardware.power_cap import apply_power_cap

        chip = apply_power_cap(chip, power_cap_w)
    if ep > 1 and not arch.num_experts:
        raise ConfigError(f"--ep {ep} but {arch.name} is a dense model (no experts); use --ep 1")
    from jalapeno.perf.frameworks import memory_rule

    rule = memory_rule(framework or None, memory_fraction)
    if framework:
        from jalapeno.perf.frameworks import apply_framework

        efficiency = apply_framework(efficiency if efficiency is not None else chip.efficiency, framework)
    return CostModel(
        arch,
        chip,
        Parallelism(tp=tp, ep=ep, pp=pp, dp=1, dp_attention=dp_attention),
        Precision(weights=precision, kv=kv),
        efficiency=efficiency,
        sram_pinning=sram_pinning,
        kv_sram_gb=kv_sram_gb,
        kv_offload=KVTier.parse(kv_offload, float(chip.host.bandwidth_gbps) if chip.host else None)
        if kv_offload else None,
        chip_features=chip_features,
        memory_rule=rule,
    )


class CostModelCache:
    """Cost models built once per exact set of :func:`cost_model_for` inputs and shared by the simulations that
    ask for the same one (a sweep's points with the same model, chip, layout and precision).

    Sharing is exact: a :class:`~jalapeno.perf.model.CostModel` is immutable after construction apart from its
    memo tables, which hold pure functions of their keys. A cache is owned by one run (a sweep creates one,
    each worker process gets its own empty copy: pickling drops the entries); nothing here is global. Inputs
    that cannot be keyed exactly (a :class:`ChipSpec` object rather than a catalogue key, an unhashable
    value) are built fresh every time. ``hits`` / ``misses`` count the lookups."""

    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._models: dict = {}
        self.hits = 0
        self.misses = 0

    def __getstate__(self) -> dict:
        return {"max_entries": self.max_entries}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["max_entries"])  # type: ignore[misc]

    def __len__(self) -> int:
        return len(self._models)

    def get(self, model: "str | ModelArch", hardware: "str | ChipSpec", **kw) -> "CostModel":
        """``cost_model_for(model, hardware, **kw)``, built on the first request for these exact inputs."""
        key = _cache_key(model, hardware, kw)
        if key is None:
            return cost_model_for(model, hardware, **kw)
        cm = self._models.get(key)
        if cm is not None:
            self.hits += 1
            return cm
        self.misses += 1
        cm = cost_model_for(model, hardware, **kw)
        if len(self._models) >= self.max_entries:
            self._models.clear()
        self._models[key] = cm
        return cm


def _cache_key(model: object, hardware: object, kw: dict) -> tuple | None:
    """A hashable key of every input (an efficiency block by its JSON), or None when one cannot be keyed."""
    if not isinstance(hardware, str):
        return None
    items = []
    for name, v in sorted(kw.items()):
        if name == "efficiency" and v is not None:
            v = ("efficiency", type(v).__name__, v.model_dump_json())
        elif name == "hardware_dir" and v is not None:
            v = tuple(str(d) for d in v)
        items.append((name, v))
    key = (model, hardware, tuple(items))
    try:
        hash(key)
    except TypeError:
        return None
    return key


@dataclass(frozen=True)
class SimLimits:
    """Scheduler limits of a simulated engine (``jalapeno simulate``'s engine flags). ``None`` values take the
    defaults: ``max_num_seqs`` = max(:data:`DEFAULT_MIN_NUM_SEQS`, requests in flight); ``max_model_len``
    unlimited. ``max_num_batched_tokens`` is raised to ``max_num_seqs × (1 + spec tokens)`` when smaller, so
    every running sequence can decode each step."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    max_model_len: int | None = None
    #: the serving stack's scheduling policy (``jalapeno.perf.frameworks.SchedulingPolicy``); None = the engine
    #: scheduler's default (vLLM V1: prefill chunks mixed into decode steps)
    scheduling: "SchedulingPolicy | None" = None

    def engine_config(self, in_flight: int | None = None, spec_tokens: int = 0) -> EngineConfig:
        """The :class:`EngineConfig` for a workload keeping ``in_flight`` requests in flight."""
        seqs = self.max_num_seqs or max(DEFAULT_MIN_NUM_SEQS, in_flight or 0)
        return EngineConfig(
            block_size=self.block_size,
            max_num_seqs=seqs,
            max_num_batched_tokens=max(self.max_num_batched_tokens, seqs * (1 + spec_tokens)),
            num_speculative_tokens=spec_tokens,
            max_model_len=self.max_model_len,
            **policy_config(self.scheduling),
        )


def policy_config(policy: "SchedulingPolicy | None") -> dict:
    """The :class:`EngineConfig` fields of a serving stack's scheduling policy (empty: the defaults)."""
    if policy is None:
        return {}
    return {"separate_prefill": policy.separate_prefill, "max_prefill_tokens": policy.max_prefill_tokens,
            "recv_interval": policy.recv_interval, "balance_ranks": policy.balance_ranks,
            "balance_timeout_iters": policy.balance_timeout_iters}


def build_sim_engines(
    cost_model: CostModelLike,
    replicas: int = 1,
    *,
    speculation: Speculation | None = None,
    limits: SimLimits | None = None,
    in_flight: int | None = None,
    single_step: bool = False,
    backend_cls: Callable[..., SimBackend] = SimBackend,
) -> list[Engine]:
    """``replicas`` engines, each over its own :class:`SimBackend` pricing steps with ``cost_model``.

    ``speculation``: speculative decoding (sets the engines' speculative tokens); ``in_flight``: the workload's
    requests in flight (sizes the default ``max_num_seqs``); ``single_step``: one decode step per
    ``engine.step()`` (a server streams each step's tokens; offline simulation leaves multi-step decode on —
    same result, faster); ``backend_cls``: a :class:`SimBackend` subclass that also observes the steps it
    prices (calibration's linearisation records each step's overhead features), pricing unchanged."""
    cfg = (limits or SimLimits()).engine_config(in_flight, speculation.num_tokens if speculation else 0)
    engines = []
    for _ in range(replicas):
        backend = backend_cls(cost_model, speculation=speculation, max_batch_tokens=cfg.max_num_batched_tokens,
                             state_seqs=cfg.max_num_seqs)  # a state slot per sequence
        if single_step:
            backend.max_multi_step = 1  # instance override: one step per engine.step(), so tokens stream per step
        engines.append(Engine(backend, cfg))
    return engines


def build_sim_engine(cost_model: CostModelLike, **kw) -> Engine:
    """One engine (see :func:`build_sim_engines`)."""
    return build_sim_engines(cost_model, 1, **kw)[0]
