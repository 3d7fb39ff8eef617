"""Small value types of the cost model: what a caller chooses (parallelism, precision) and what it gets back.

Units: seconds, joules, FLOP, bytes. Totals are summed over every chip of one replica unless a field name
says ``per_chip``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jalapeno.errors import ConfigError

#: "fp32": every weight, the KV cache and the activations in float32 (the torch backend on CPU)
WEIGHT_PRECISIONS = ("native", "bf16", "fp8", "fp4", "mxfp4", "int4", "fp32")
KV_PRECISIONS = ("bf16", "fp8", "fp32")
ACT_PRECISIONS = ("bf16",)


@dataclass(frozen=True)
class Parallelism:
    """How one model replica is spread over chips.

    ``tp`` tensor parallel ranks; ``ep`` expert-parallel ranks *inside* the tp group (experts are split over
    ``ep`` ranks, each expert is further split ``tp/ep`` ways); ``pp`` pipeline stages; ``dp`` independent
    replicas. One replica uses ``tp*pp`` chips; ``num_chips = tp*pp*dp``. With ``dp_attention`` attention runs
    data-parallel over the tp ranks (full attention weights on every rank, the batch split over ranks) while
    the MLP/MoE layers stay tp/ep-sharded (SGLang / vLLM "DP attention").
    """

    tp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    dp_attention: bool = False

    def expert_slots(self, num_experts: int) -> int:
        """Expert slots over the ``ep`` ranks: ``num_experts`` when ``ep`` divides it, else padded to
        ``ceil(E/ep)·ep`` with redundant copies of (hot) experts, as wide-EP deployments do (DeepSeek's 256
        routed experts over EP 72 → 288 slots = 256 + 32 redundant; EPLB). Every rank holds ``slots/ep``."""
        return -(-num_experts // self.ep) * self.ep if num_experts else 0

    def __post_init__(self) -> None:
        for name in ("tp", "ep", "pp", "dp"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"parallelism {name}={v!r} must be a positive integer")
        if self.tp % self.ep:
            raise ConfigError(
                f"ep={self.ep} must divide tp={self.tp}: expert-parallel ranks live inside the tensor-parallel group"
            )

    @property
    def chips_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def num_chips(self) -> int:
        return self.tp * self.pp * self.dp

    def describe(self) -> str:
        s = f"tp={self.tp}"
        for name in ("ep", "pp", "dp"):
            if getattr(self, name) > 1:
                s += f", {name}={getattr(self, name)}"
        return s + (", dp-attention" if self.dp_attention else "")


@dataclass(frozen=True)
class Precision:
    """Storage formats. ``weights``: "native" (the checkpoint's format), "bf16", "fp8" (128x128 block-scaled),
    "fp4"/"mxfp4" (MXFP4; MoE models quantize only the routed experts, dense models all linear layers),
    "int4" (same scope as fp4, weight-only), "fp32" (everything float32, as the torch backend runs on CPU: the
norms, embedding and LM head too, and the activations). ``kv``: "bf16" | "fp8" | "fp32". ``activations``: "bf16"."""

    weights: str = "native"
    kv: str = "bf16"
    activations: str = "bf16"

    def __post_init__(self) -> None:
        if self.weights not in WEIGHT_PRECISIONS:
            raise ConfigError(f"weight dtype {self.weights!r} is not one of {', '.join(WEIGHT_PRECISIONS)}")
        if self.kv not in KV_PRECISIONS:
            raise ConfigError(f"kv dtype {self.kv!r} is not one of {', '.join(KV_PRECISIONS)}")
        if self.activations not in ACT_PRECISIONS:
            raise ConfigError(f"activation dtype {self.activations!r} is not one of {', '.join(ACT_PRECISIONS)}")


@dataclass(frozen=True)
class StepCost:
    """Fast-path result for one step of one replica. ``flops`` and ``bytes`` are summed over its chips
    (``bytes`` over all memory levels)."""

    time_s: float
    energy_j: float
    flops: float = 0.0
    bytes: float = 0.0

    @classmethod
    def of(cls, time_s: float, energy_j: float, flops: float, bytes: float) -> "StepCost":
        """``StepCost(...)`` with every field given, cheaper (one per priced step): the new frozen instance's
        dict written directly instead of ``object.__setattr__`` per field. The same object."""
        s = object.__new__(cls)
        d = s.__dict__
        d["time_s"] = time_s
        d["energy_j"] = energy_j
        d["flops"] = flops
        d["bytes"] = bytes
        return s

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0


@dataclass(frozen=True)
class OpCost:
    """One operator of a step, summed over all layers it occurs in and over the replica's chips.

    ``bytes`` maps memory-level name -> bytes moved; ``net_bytes`` counts bytes sent over the network;
    ``time_s`` is the time it adds to the step; ``bound`` is "compute", "memory", "network" or "overhead";
    ``share`` is ``time_s / step time``; ``dtype`` the compute dtype it runs at.
    """

    name: str
    flops: float
    bytes: dict[str, float]
    net_bytes: float
    time_s: float
    bound: str
    share: float
    dtype: str = ""
    layers: int = 0

    @property
    def total_bytes(self) -> float:
        return sum(self.bytes.values())

    @property
    def intensity(self) -> float:
        b = self.total_bytes
        return self.flops / b if b > 0 else float("inf")


@dataclass(frozen=True)
class StepBreakdown:
    """Per-operator view of one step, with the same totals as :meth:`CostModel.step`."""

    ops: tuple[OpCost, ...]
    time_s: float
    energy_j: float
    flops: float
    bytes: dict[str, float]
    net_bytes: float
    tokens: int
    num_chips: int
    #: time of the slowest pipeline stage (== time_s when pp == 1): the interval at which a new micro-batch
    #: could enter if several batches were in flight
    stage_time_s: float = 0.0

    @property
    def total_bytes(self) -> float:
        return sum(self.bytes.values())

    @property
    def arithmetic_intensity(self) -> float:
        b = self.total_bytes
        return self.flops / b if b > 0 else float("inf")

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.time_s if self.time_s > 0 else 0.0

    @property
    def joules_per_token(self) -> float:
        return self.energy_j / self.tokens if self.tokens else 0.0

    def op(self, name: str) -> OpCost:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def totals(self) -> dict[str, float]:
        return {
            "step_time_s": self.time_s,
            "flops": self.flops,
            "bytes": self.total_bytes,
            "net_bytes": self.net_bytes,
            "arithmetic_intensity": self.arithmetic_intensity,
            "energy_j": self.energy_j,
            "avg_power_w": self.avg_power_w,
            "tokens_per_s": self.tokens_per_s,
            "joules_per_token": self.joules_per_token,
        }


@dataclass(frozen=True)
class MemoryPlan:
    """Where things live, per chip, and how many KV tokens one replica can hold. Bytes unless noted."""

    capacity_bytes_per_chip: float  # usable capacity of the level weights live in (after utilization)
    weight_bytes_per_chip: float  # the fullest chip (pipeline stages can differ)
    weight_location: str  # memory level name, e.g. "sram" or "hbm"
    kv_location: str
    activation_reserve_bytes: float  # per chip, for max_batch_tokens in flight
    kv_bytes_available_per_chip: float
    #: KV bytes one token of one sequence occupies, summed over the chips holding that sequence's KV
    kv_bytes_per_token: float
    #: KV tokens one replica can hold (what a KV block manager gets)
    kv_capacity_tokens: int
    weights_in_sram: bool = False
    #: weight bytes per chip pinned in resident SRAM (all of them when ``weights_in_sram``)
    sram_weight_bytes_per_chip: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: linear-attention recurrent state one sequence keeps, summed over the chips holding it (per replica,
    #: fullest pipeline stage); constant in the context length. 0 for models without linear attention
    state_bytes_per_sequence: float = 0.0
    #: per chip, set aside from the KV pool for ``state_sequences`` sequences' states
    state_reserve_bytes_per_chip: float = 0.0
    state_sequences: int = 0
    #: of ``kv_capacity_tokens``, the tokens whose KV sits in on-chip SRAM (``--kv-sram-gb``; the fastest tier)
    kv_sram_tokens: int = 0
    #: KV tokens one replica can park in its offload tier (host DRAM / SSD), outside ``kv_capacity_tokens``
    kv_offload_tokens: int = 0


#: the kinds of :class:`MemoryRule`: how a serving stack sizes its KV cache from the chip's main memory
MEMORY_RULE_KINDS = ("total", "static", "free")


@dataclass(frozen=True)
class MemoryRule:
    """How a serving stack budgets one chip's main memory (HBM/DRAM) between weights, activations and the KV cache.
    ``fraction`` in (0, 1]; ``T`` the chip's total memory (``capacity_gb``: what nvidia-smi / rocm-smi report),
    ``W`` the weights per chip, ``A`` the activation reserve of one step:

    * ``total`` -- vLLM ``gpu_memory_utilization``: weights, activations and KV together within ``fraction * T``;
      KV = ``fraction * T - W - A``; weights must fit in ``fraction * T``. The simulator's default (0.9).
    * ``static`` -- SGLang ``mem_fraction_static``: weights and the KV pool within ``fraction * T``, activations
      and CUDA graphs in the rest; KV = ``fraction * T - W``; weights must fit in ``fraction * T``.
    * ``free`` -- TensorRT-LLM ``kv_cache_config.free_gpu_memory_fraction``: the KV cache takes that fraction of
      the memory still free once the weights are loaded and a forward pass has run; KV = ``fraction * (T - W - A)``;
      weights must fit in ``T``.

    Applies to main memory only: a resident SRAM level is used whole (``SRAM_UTILIZATION``). docs/cost-model.md."""

    kind: str = "total"
    fraction: float = 0.9
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in MEMORY_RULE_KINDS:
            raise ConfigError(f"memory rule {self.kind!r}: use one of {', '.join(MEMORY_RULE_KINDS)}")
        f = self.fraction
        if not isinstance(f, (int, float)) or f != f or not 0.0 < f <= 1.0:
            raise ConfigError(f"memory fraction {f!r} is outside (0, 1]: give the share of the chip's memory the "
                              "serving stack may use, e.g. 0.9")

    def weight_cap(self, total: float) -> float:
        """Bytes of main memory the weights may take (the rest of the rule's budget holds KV and activations)."""
        return total if self.kind == "free" else self.fraction * total

    def kv_bytes(self, total: float, weights: float, activations: float) -> float:
        """Bytes left for the KV cache (may be <= 0: nothing fits) of a chip of ``total`` bytes of main memory
        holding ``weights`` bytes of weights, with ``activations`` bytes reserved for one step's activations."""
        if self.kind == "total":
            return self.fraction * total - weights - activations
        if self.kind == "static":
            return self.fraction * total - weights
        return self.fraction * (total - weights - activations)

    def describe(self) -> str:
        name = {"total": "gpu_memory_utilization", "static": "mem_fraction_static",
                "free": "free_gpu_memory_fraction"}[self.kind]
        return f"{name} {self.fraction:g}"


@dataclass(frozen=True)
class KVTier:
    """A KV offload tier below the chip's memory: host DRAM over the chip's host link, or an SSD / remote
    pool. Per chip: ``capacity_gb`` it may hold, ``bandwidth_gbps`` to bring blocks back (per direction)."""

    name: str  # "host" | "ssd"
    capacity_gb: float
    bandwidth_gbps: float

    @classmethod
    def parse(cls, text: str, host_gbps: float | None = None) -> "KVTier":
        """``host:GB[:GBPS]`` or ``ssd:GB:GBPS`` (per chip). ``host`` without GBPS takes ``host_gbps`` (the chip's
        host link, ``ChipSpec.host``)."""
        parts = [p.strip() for p in str(text).split(":")]
        hint = "give --kv-offload host:GB[:GBPS] or ssd:GB:GBPS (per chip), e.g. host:200"
        if parts[0] not in ("host", "ssd") or len(parts) not in (2, 3):
            raise ConfigError(f"--kv-offload {text!r}: {hint}")
        try:
            nums = [float(x) for x in parts[1:]]
        except ValueError:
            raise ConfigError(f"--kv-offload {text!r}: GB and GB/s must be numbers; {hint}") from None
        gb = nums[0]
        gbps = nums[1] if len(nums) == 2 else (host_gbps if parts[0] == "host" else None)
        if gbps is None:
            raise ConfigError(f"--kv-offload {text!r}: no bandwidth known for this tier (the chip's hardware file has "
                              f"no host section); {hint}")
        if not gb > 0 or not gbps > 0:
            raise ConfigError(f"--kv-offload {text!r}: capacity and bandwidth must be > 0; {hint}")
        return cls(parts[0], gb, gbps)
