"""Hardware described as data: the pydantic schema of one chip's YAML file.

Every number is a :class:`Fact`: a value together with the source it was read from and its status
(``vendor-peak``, ``announced``, ``measured``, ``third-party``, ``seed``, ``inferred``, ``fitted`` (by
``jalapeno calibrate`` from measurements), ``designed`` (by ``jalapeno design``) or ``unknown``).
Units are fixed by field name: TFLOPS (dense, 1e12 FLOP/s), GB (1e9 B), TB/s (1e12 B/s), GB/s (1e9 B/s),
microseconds, watts, USD per chip-hour. Network bandwidths are **per chip, per direction** (unidirectional).

The cost model (``jalapeno.perf``) reads only this schema; it never looks at YAML.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Status = Literal[
    "vendor-peak", "announced", "measured", "third-party", "seed", "inferred", "fitted", "designed", "unknown"
]

#: Compute dtypes a chip may execute natively. ``fp4`` covers MXFP4/NVFP4 tensor-core rates.
#: ``fp32`` is listed only where an engine computes in float32 (a CPU probed by ``jalapeno hardware probe``).
ComputeDtype = Literal["bf16", "fp16", "fp8", "fp4", "int8", "int4", "fp32"]
COMPUTE_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp4", "int8", "int4", "fp32")

Topology = Literal["switch", "torus2d", "torus3d", "boardfly", "dragonfly", "mesh", "ring", "chain", "fully-connected",
                   "none"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Fact(_Strict):
    """A sourced number. ``value`` is None only when ``status == 'unknown'``."""

    value: float | None
    source: str = Field(min_length=1, description="URL or citation the value was read from, or the reasoning for an inferred value")
    status: Status
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> "Fact":
        if self.value is None and self.status != "unknown":
            raise ValueError("value is missing (null) but status is not 'unknown'")
        if self.value is not None and self.value < 0:
            raise ValueError(f"value must be >= 0, got {self.value}")
        return self

    def __float__(self) -> float:
        return float(self.value or 0.0)


class MemoryLevel(_Strict):
    """One level of the memory hierarchy, per chip."""

    name: str  # e.g. "sram", "hbm", "lpddr5"
    kind: Literal["sram", "hbm", "dram"]
    capacity_gb: Fact
    bandwidth_tbps: Fact
    #: True when software can keep weights / KV resident here (Groq, Cerebras, Jalapeño SRAM; all HBM/DRAM).
    #: False for hardware-managed caches such as a GPU's L2, which the cost model then ignores for placement.
    resident: bool = True
    #: True when software pins always-read weights here when not all weights fit (Jalapeño's "pinned active
    #: layer parameters"); the cost model's default for ``sram_pinning``. Meaningful on a resident SRAM level.
    pin_weights: bool = False
    #: True when software can place KV-cache blocks here (a KV tier: Jalapeño's "explicitly positioning KV
    #: Cache", TPU 8i's added SRAM). Used only when a run asks for it (``--kv-sram-gb``); SRAM-only chips
    #: (Groq, Cerebras) keep their KV in SRAM anyway.
    kv_resident: bool = False


class HostMemory(_Strict):
    """The host memory one chip can offload KV blocks to, and the link between them (per chip, per direction):
    PCIe to a CPU socket's DRAM, or NVLink-C2C to a Grace CPU's LPDDR5X."""

    capacity_gb: Fact  # host DRAM per chip
    bandwidth_gbps: Fact  # chip <-> host, per direction
    link: str = ""  # e.g. "PCIe Gen5 x16", "NVLink-C2C"


class ChipFeatures(_Strict):
    """Hardware features the cost model can switch off (``--chip-features off``) to study what they buy.
    Each is what the seeds describe for Jalapeño; a chip without a feature pays what its calibrated overheads
    already hold."""

    #: accept/reject of speculative tokens in silicon ("hardware-level token validation loops"): no host
    #: round trip per verify step
    spec_verify_unit: bool = False
    #: KV page tables walked by an on-chip MMU ("zero CPU clock cycles" per KV page access): no host work per
    #: KV block per step
    kv_page_table: bool = False
    source: str = ""


class NetworkLink(_Strict):
    """A network as one chip sees it."""

    bandwidth_gbps: Fact  # per chip, per direction
    latency_us: Fact  # per hop (or per message for switched fabrics)
    topology: Topology = "switch"
    #: chips in one domain (scale-up: NVLink domain, torus/pod size; scale-out: 0 = unbounded)
    domain_size: int = Field(default=0, ge=0)
    #: worst-case hop count across a full domain, where the topology defines one (BoardFly 7 vs 3D torus 16)
    max_hops: int | None = Field(default=None, ge=0)
    #: dragonfly / boardfly: chips per board (fully connected) and per group (boards fully connected); groups
    #: are fully connected. None: BoardFly's 4 and 32 (TPU 8i)
    board_size: int | None = Field(default=None, ge=1)
    group_size: int | None = Field(default=None, ge=1)


class CollectiveEngine(_Strict):
    """Hardware that runs collectives off the compute cores (TPU 8i's Collectives Acceleration Engine): the
    layers' collectives proceed while the cores compute, in decode steps too."""

    #: fraction of a layer collective's bandwidth time hidden under compute (every token, decode included)
    overlap: Fact
    #: fraction of its latency term left (the engine skips the cores' own synchronisation and data movement)
    latency_factor: Fact


class Power(_Strict):
    tdp_w: Fact
    #: power actually drawn under a serving load, when known (e.g. Jalapeño <= 550 W)
    loaded_w: Fact | None = None
    idle_w: Fact | None = None
    #: facility overhead per chip (host CPU, NICs, cooling share) in watts, on top of the chip, for tokens/MW
    facility_overhead_w: Fact | None = None


#: the routed experts' weight formats :class:`PrefillMoeKernel` entries are keyed by (``perf.model.expert_format``):
#: 16-bit, FP8 (block-scaled: DeepSeek's native checkpoint), a 4-bit checkpoint of a model whose native weights are
#: not 4-bit (InferenceX's "fp4" DeepSeek-R1: NVFP4 on NVIDIA) and a native MXFP4 checkpoint (GPT-OSS: MXFP4 x MXFP8
#: on Blackwell)
EXPERT_FORMATS = ("bf16", "fp8", "nvfp4", "mxfp4")


class PrefillMoeKernel(_Strict):
    """The routed experts' grouped-GEMM MoE op at prefill token counts, measured on one chip for one expert weight
    format (aiconfigurator's TensorRT-LLM MoE table, ``benchmarks/aic_ops.py --moe-terms``: least squares in
    relative error of ``t = t0 + FLOPs / (peak x compute) + expert_us x experts on the rank + token_ns x tokens``).
    Priced only in steps that prefill (the form does not hold at decode token counts), per MoE layer."""

    #: achieved fraction of the experts' compute dtype peak at prefill token counts (replaces, for prefill tokens,
    #: the rate the roofline used); None: the roofline's own
    compute: float | None = Field(default=None, gt=0, le=1)
    #: per expert held on the busiest rank (experts / ep, as touched by the step), microseconds
    expert_us: float = Field(default=0.0, ge=0)
    #: per prefill token the rank's MoE op takes in (activation quantization of the FP4 paths), nanoseconds
    token_ns: float = Field(default=0.0, ge=0)
    #: per MoE layer: the op's intercept less the MoE block's kernels a step already charges
    #: (``KERNELS["moe"]`` x (``kernel_launch_us`` + ``kernel_overhead_us``); not below 0), microseconds
    layer_us: float = Field(default=0.0, ge=0)


class Efficiency(_Strict):
    """Achievable fractions of vendor peak, and fixed costs. These are what calibration fits: few and named."""

    #: achievable fraction of peak compute, per dtype (large GEMMs); missing dtypes use ``compute_default``
    compute: dict[str, float] = Field(default_factory=dict)
    compute_default: float = Field(default=0.7, gt=0, le=1)
    #: achievable fraction of each memory level's bandwidth, by level name; missing levels use ``memory_default``
    memory: dict[str, float] = Field(default_factory=dict)
    memory_default: float = Field(default=0.85, gt=0, le=1)
    #: achievable fraction of scale-up / scale-out bandwidth for collectives
    scale_up: float = Field(default=0.8, gt=0, le=1)
    scale_out: float = Field(default=0.8, gt=0, le=1)
    #: fixed per-step overhead (kernel launches, scheduling, sampling host work), microseconds
    step_overhead_us: float = Field(default=0.0, ge=0)
    #: fixed per-layer overhead (per kernel group), microseconds, every layer of every step
    layer_overhead_us: float = Field(default=0.0, ge=0)
    #: extra per MoE layer on top of ``layer_overhead_us`` (router, top-k, dispatch/combine, grouped-GEMM
    #: launches), microseconds
    moe_layer_overhead_us: float = Field(default=0.0, ge=0)
    #: per GPU kernel a step runs (each kernel's launch gap, prologue and tail, even replayed from a CUDA/HIP
    #: graph), microseconds; the kernels are counted from the model's architecture (``perf.model.kernel_count``:
    #: an MLA layer runs more than a GQA one, a MoE block more than a dense MLP, tensor parallelism adds the
    #: all-reduces), so one value per chip family covers every model
    kernel_overhead_us: float = Field(default=0.0, ge=0)
    #: per sequence in the step (decode sequences + prefill chunks): scheduler, sampler and attention-metadata
    #: host work and the attention kernel's per-sequence cost, microseconds
    seq_overhead_us: float = Field(default=0.0, ge=0)
    #: per layer, only in steps that prefill (run eagerly / piecewise, not as one captured CUDA graph: their
    #: kernel launches are not hidden), microseconds
    prefill_layer_overhead_us: float = Field(default=0.0, ge=0)
    #: per GPU kernel of a step that prefills (``perf.model.kernel_count``, the same count as
    #: ``kernel_overhead_us``): an eager / piecewise prefill step launches every kernel from the host, so its
    #: fixed cost follows the architecture's kernel count (DeepSeek-R1 1,327 at TP8, GPT-OSS-120B 507), not its
    #: layer count (issue #13 step 7: the low-concurrency TTFT intercepts of both models on three vendors),
    #: microseconds
    prefill_kernel_overhead_us: float = Field(default=0.0, ge=0)
    #: per routed expert a chip runs in one MoE layer, every step (the fused/grouped MoE GEMM's per-expert
    #: cost at small M: tile scheduling, pipeline fill and wave tail for each active expert), microseconds
    expert_overhead_us: float = Field(default=0.0, ge=0)
    #: per routed expert a chip runs in one MoE layer of a step that prefills (the grouped-GEMM path of eager
    #: prefill schedules one small GEMM per expert; decode runs a captured fused-MoE kernel), microseconds
    prefill_expert_overhead_us: float = Field(default=0.0, ge=0)
    #: per prefill token (chunked-prefill bookkeeping, small-tile GEMM and attention inefficiency beyond the
    #: large-GEMM fraction), nanoseconds
    prefill_token_overhead_ns: float = Field(default=0.0, ge=0)
    #: fraction of the per-token collective time of prefill tokens hidden under compute (overlapped
    #: all-reduce / all-to-all); decode tokens keep theirs exposed
    prefill_collective_overlap: float = Field(default=0.0, ge=0, lt=1)
    #: fixed latency each request spends between the client and its first scheduling (HTTP, tokenization,
    #: admission), milliseconds. It is in TTFT and E2E latency, not in step time.
    request_overhead_ms: float = Field(default=0.0, ge=0)
    #: front-end time per prompt token (tokenization, request copy), microseconds; adds to the per-request
    #: latency like ``request_overhead_ms``
    request_overhead_us_per_token: float = Field(default=0.0, ge=0)
    #: per MoE layer whose routed experts are FP8 128x128 block-scaled weights (DeepSeek's native FP8), every
    #: step: the serving stack's block-scaled FP8 grouped-GEMM path beyond its roofline (activation quantization
    #: to 1x128 groups, scale re-layout for the chip's tensor cores, the small-M latency floor of block-scaled FP8
    #: GEMM kernels), microseconds. Usually set per stack by ``framework_fp8_moe_layer_us`` (``--framework``)
    fp8_moe_layer_overhead_us: float = Field(default=0.0, ge=0)
    #: share of each decode kernel's fixed cost (``kernel_launch_us`` + ``kernel_overhead_us``) hidden when the
    #: serving stack launches its kernels with Programmatic Dependent Launch (NVIDIA Hopper and later: a kernel's
    #: launch and prologue run under its predecessor's tail), in [0, 1). It applies only to a run launched with
    #: PDL (``launch_pdl``: e.g. InferenceX's GPT-OSS TensorRT-LLM scripts, ``TRTLLM_ENABLE_PDL=1``); 0: none
    pdl_kernel_fraction: float = Field(default=0.0, ge=0, lt=1)
    #: this run launches its kernels with PDL (a launch flag, set per run: ``calibration.launch.launch_efficiency``)
    launch_pdl: bool = False
    #: host time per GPU kernel of an eagerly run prefill step (the serving stack's Python forward issues every
    #: kernel from the host), microseconds: a step that prefills lasts at least ``kernels x this`` (the kernel count
    #: of ``kernel_overhead_us``, ``perf.model.kernel_count``: the device idles between kernels while the host
    #: issues them) and otherwise its device time — max(host, device), not their sum: a short prompt on a fast
    #: chip is host-bound, a long one device-bound. Usually set per stack by ``framework_prefill_host_kernel_us``
    #: (``--framework``). 0: none
    prefill_host_kernel_us: float = Field(default=0.0, ge=0)
    #: per serving framework (``jalapeno.perf.frameworks`` key -> us): this chip family's fitted
    #: ``prefill_host_kernel_us`` under that stack (B200: SGLang's eager DeepSeek-R1 prefill; docs/fidelity.md step 12b)
    framework_prefill_host_kernel_us: dict[str, float] = Field(default_factory=dict)
    #: per serving framework (``jalapeno.perf.frameworks`` key -> us): this chip family's
    #: ``fp8_moe_layer_overhead_us`` under that stack (B200: TensorRT-LLM's FP8 block-scale MoE; docs/cost-model.md)
    framework_fp8_moe_layer_us: dict[str, float] = Field(default_factory=dict)
    #: per serving framework (``jalapeno.perf.frameworks`` key -> ms): this chip family's fitted front-end latency
    #: of that stack; replaces the framework profile's global value when ``--framework`` names it
    framework_overhead_ms: dict[str, float] = Field(default_factory=dict)
    #: GEMM efficiency by the rows it multiplies (M -> achieved fraction of peak compute), measured by ``jalapeno
    #: hardware probe``: a GEMM with few rows (decode, verification) reaches a fraction of what a large one does.
    #: Interpolated in log(M), clamped at both ends; it replaces ``compute`` / ``compute_default`` for weight GEMMs
    #: (not attention, norms or sampling). None (every catalogue chip): all GEMMs run at the large-GEMM fraction
    compute_by_rows: dict[int, float] | None = None
    #: per (query head, context key, attention layer) of a decode row, nanoseconds: a CPU engine's attention
    #: kernel (scores, softmax exponentials, weighted sum, key by key per head) runs far below its GEMM rate and
    #: above its KV bytes' time, and grows with the context; measured by ``jalapeno hardware probe`` (decode
    #: steps at two contexts) and fitted as what the roofline leaves unpriced. 0 (every catalogue chip): none
    decode_attention_ns: float = Field(default=0.0, ge=0)
    #: picoseconds per stored byte of weight-only-quantized weights (MXFP4 on a chip without FP4 tensor cores,
    #: INT4: W4A16) a GEMM dequantizes to its 16-bit compute dtype: the SMs' dequantization, a compute-side time
    #: floor of that GEMM (the roofline's max with its memory time, so a chip whose HBM is faster than its
    #: dequantization runs those weights at the dequantization rate: 1 / this = TB/s). Fitted on serving points
    #: (issue #13 step 8: GPT-OSS-120B's MXFP4 experts on Hopper). 0 (default): not priced
    weight_dequant_ps_per_byte: float = Field(default=0.0, ge=0)
    #: seconds (ns) per (query head, query, key, attention layer) of the ``[chunk, context]`` rectangle a prefill
    #: chunk computes when it takes the CPU torch backend's PyTorch attention path (the context gathered through the
    #: block table, then SDPA under an explicit mask: no causal block skipped) instead of the flash kernel that fresh
    #: prompts take (alone or beside decode rows): a later chunk of a prompt (since the fourteenth session only where
    #: the C kernel cannot take it with a key offset; otherwise what is left is the prefix's gather and packing). On
    #: top of the roofline (whose causal pairs price the flash kernel); measured by ``jalapeno hardware probe`` (later
    #: chunks alone and beside one decode row, ``probe.MASKED_STEPS``) and fitted by ``jalapeno calibrate --probe``.
    #: 0 (every catalogue chip): none
    masked_prefill_attention_ns: float = Field(default=0.0, ge=0)
    #: per layer of a step the CPU torch backend runs on its PyTorch (unfused) path — more tokens than
    #: ``execution.fused_max_batch`` (every step when there is no fused kernel) —, microseconds: the host cost of
    #: the path's many small operators (dispatch, and each parallel region waking the OpenMP workers that the
    #: server's passive wait policy lets sleep) beyond their priced work. Measured by ``jalapeno hardware probe``
    #: on an engine loop of the served model (``probe.measure_engine_loop``) and fitted by ``jalapeno calibrate
    #: --probe`` (``probe_fit.fit_unfused_overhead``). 0 (every catalogue chip): none
    unfused_layer_overhead_us: float = Field(default=0.0, ge=0)
    #: the share of the shorter of an operator's compute and memory times hidden under the longer: op time =
    #: max(c, m) + (1 - overlap) x min(c, m). None (every catalogue chip) = 1, the roofline max
    compute_memory_overlap: float | None = Field(default=None, ge=0, le=1)
    #: achievable fraction of the attention math dtype's peak at which a prefill chunk's causal (query, key) pairs
    #: run (flash attention on the tensor cores: softmax, masking and the online rescale between the two GEMMs),
    #: measured per chip from TensorRT-LLM's context-attention kernel (aiconfigurator's silicon tables,
    #: ``benchmarks/aic_ops.py --fit``). None (default): the dtype's ``compute`` fraction (large GEMMs)
    prefill_attention_compute: float | None = Field(default=None, gt=0, le=1)
    #: nanoseconds per (prefill query token, query head, attention layer) on one chip: the context-attention
    #: kernel's per-query-row work beyond its FLOPs (Q load, softmax normalisation, output write), which sets
    #: its time at short prompts; measured beside ``prefill_attention_compute``. 0 (default): none
    prefill_attention_ns_per_query_head: float = Field(default=0.0, ge=0)
    #: microseconds per attention layer of a step that prefills: the context-attention op's fixed cost beyond
    #: the one kernel ``kernel_count`` already charges it (the measured op's intercept less
    #: ``kernel_launch_us`` + ``kernel_overhead_us``); measured beside ``prefill_attention_compute``. 0: none
    prefill_attention_layer_us: float = Field(default=0.0, ge=0)
    #: achievable fraction of peak compute of the routed experts' grouped GEMMs, by compute dtype (``fp4``,
    #: ``fp8``, ``bf16``), at prefill token counts; measured from TensorRT-LLM's MoE op (aiconfigurator). A dtype
    #: not listed: its ``compute`` fraction (large dense GEMMs)
    moe_compute: dict[str, float] = Field(default_factory=dict)
    #: the routed experts' measured prefill MoE op by expert weight format (:data:`EXPERT_FORMATS` ->
    #: :class:`PrefillMoeKernel`), a chip fact (not fitted; a transfer of fitted values leaves it with its chip).
    #: A format not listed (every non-NVIDIA chip): nothing added, ``prefill_expert_overhead_us`` alone
    prefill_moe: dict[str, PrefillMoeKernel] = Field(default_factory=dict)
    source: str = "defaults"
    #: provenance of the values above that ``jalapeno calibrate`` fitted: parameter name (``step_overhead_us``,
    #: ``compute.fp8``, ...) -> a Fact with status ``fitted`` naming the data and command it came from
    fitted: dict[str, "Fact"] = Field(default_factory=dict)

    @field_validator("compute", "memory", "moe_compute")
    @classmethod
    def _fractions(cls, v: dict[str, float]) -> dict[str, float]:
        for k, x in v.items():
            if not 0 < x <= 1:
                raise ValueError(f"efficiency {k}={x} must be in (0, 1]")
        return v

    @field_validator("prefill_moe")
    @classmethod
    def _moe_formats(cls, v: dict[str, "PrefillMoeKernel"]) -> dict[str, "PrefillMoeKernel"]:
        bad = [k for k in v if k not in EXPERT_FORMATS]
        if bad:
            raise ValueError(f"prefill_moe format {bad[0]!r} is not one of {', '.join(EXPERT_FORMATS)}")
        return v

    @field_validator("framework_fp8_moe_layer_us", "framework_prefill_host_kernel_us")
    @classmethod
    def _stack_terms(cls, v: dict[str, float], info) -> dict[str, float]:
        for k, x in v.items():
            if x < 0:
                raise ValueError(f"{info.field_name} {k}={x} must be >= 0 microseconds per layer")
        return v

    @field_validator("compute_by_rows")
    @classmethod
    def _rows_table(cls, v: dict[int, float] | None) -> dict[int, float] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("compute_by_rows must list at least one row count (or be left out)")
        for m, x in v.items():
            if m < 1 or not 0 < x <= 1:
                raise ValueError(f"compute_by_rows {m}: {x} needs rows >= 1 and a fraction in (0, 1]")
        return dict(sorted(v.items()))


class Energy(_Strict):
    """Energy coefficients for the power model: step energy = idle power × time + Σ energy per unit of work,
    capped at TDP × time. Values in picojoules."""

    pj_per_flop: dict[str, float] = Field(default_factory=dict)  # by compute dtype
    pj_per_byte: dict[str, float] = Field(default_factory=dict)  # by memory level name
    pj_per_network_byte: float = 0.0
    source: str = "defaults"


class Calibration(_Strict):
    """How a chip's serving parameters (its ``efficiency`` block) were obtained: the confidence label that
    ``simulate``, sweeps, ``recommend`` and the report show next to every answer.

    * ``calibrated``: fitted on ``points`` published (or the user's own) measured serving points of this chip;
      ``median_error_pct`` is the median |error| on points held out of that fit (``metric`` names which).
    * ``transferred``: taken from the calibration of ``transferred_from`` (a chip of the same family/stack).
    * ``uncalibrated``: vendor peaks and kernel-level fractions only; no serving measurement checked it.
    """

    status: Literal["calibrated", "transferred", "uncalibrated"] = "uncalibrated"
    points: int = Field(default=0, ge=0)
    median_error_pct: float | None = Field(default=None, ge=0)
    metric: str = "output_tput_per_gpu"
    transferred_from: str | None = None
    source: str = ""
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> "Calibration":
        if self.status == "transferred" and not self.transferred_from:
            raise ValueError("calibration status 'transferred' needs transferred_from (the chip it came from)")
        if self.status == "calibrated" and self.points < 1:
            raise ValueError("calibration status 'calibrated' needs points >= 1 (how many measurements were fitted)")
        return self

    def label(self) -> str:
        """One short human label, e.g. 'calibrated (212 pts, 9.8% median error)'."""
        if self.status == "calibrated":
            err = f", {self.median_error_pct:.1f}% median error" if self.median_error_pct is not None else ""
            return f"calibrated ({self.points} pt{'s' if self.points != 1 else ''}{err})"
        if self.status == "transferred":
            return f"transferred from {self.transferred_from}"
        return "uncalibrated"


class ThreadPolicyChoice(_Strict):
    """A measured OpenMP thread policy: how idle workers wait (``OMP_WAIT_POLICY``) and whether they are pinned
    to cores (``GOMP_CPU_AFFINITY``); applied by the engine's entry points before torch loads."""

    wait: Literal["PASSIVE", "ACTIVE"]
    pinned: bool
    status: Status
    source: str = Field(min_length=1)
    note: str = ""


class Execution(_Strict):
    """How the torch backend should run on this machine, chosen from measurements (``jalapeno hardware probe``
    writes it for the local chip): the fused CPU decode kernel's crossover (most tokens of a step it takes;
    0 = off), the fewest rows from which its panel GEMMs beat its dot-product tiles (absent in probes from
    before them), and the intra-op thread count."""

    fused_max_batch: Fact
    threads: Fact
    panel_min_rows: Fact | None = None
    #: the OpenMP thread policy measured best here (absent in probes from before it; entry points then use
    #: the default, idle workers sleeping, unpinned): see :mod:`jalapeno.hardware.threads`
    thread_policy: ThreadPolicyChoice | None = None


class Price(_Strict):
    usd_per_hour: Fact  # per chip-hour


class ChipSpec(_Strict):
    """One accelerator (per chip / per package), as the YAML file describes it."""

    key: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", description="canonical short name, e.g. 'h200'")
    name: str
    vendor: str
    status: Status  # overall status of the profile
    aliases: list[str] = Field(default_factory=list)
    description: str = ""
    #: dense peak rate per compute dtype in TFLOPS (TOPS for int). A dtype absent here is not native.
    compute_tflops: dict[ComputeDtype, Fact]
    memory: list[MemoryLevel] = Field(min_length=1)
    scale_up: NetworkLink
    scale_out: NetworkLink | None = None
    #: on-chip collective offload (None: collectives run on the compute cores and add to the step)
    collective_engine: CollectiveEngine | None = None
    power: Power
    price: Price | None = None
    #: host DRAM and the chip<->host link, where KV blocks can be offloaded (``--kv-offload host:GB``)
    host: HostMemory | None = None
    features: ChipFeatures = Field(default_factory=ChipFeatures)
    efficiency: Efficiency = Field(default_factory=Efficiency)
    #: the chip's own share of each GPU kernel's fixed cost in a graph-replayed step, microseconds: the dispatch
    #: gap between consecutive kernels of a captured CUDA / HIP graph (command processor and the driver runtime's
    #: per-node submission; a microbenchmark of graph-replayed empty kernels measures it). A chip fact with its
    #: source, never fitted: the serving stack's share is the fitted ``efficiency.kernel_overhead_us``, and the
    #: cost model charges their sum per kernel, so a cross-vendor transfer of fitted values keeps the target
    #: chip's own launch gap. None (or status unknown): not split, the fitted term carries all of it
    kernel_launch_us: Fact | None = None
    #: the time Programmatic Dependent Launch hides per GPU kernel of a graph-replayed step, microseconds, in a
    #: run launched with PDL (``efficiency.launch_pdl``; NVIDIA Hopper and later): the next kernel's launch and
    #: prologue run under its predecessor's tail. A chip-family fact from a published with/without-PDL
    #: measurement (status measured or inferred, with its source), never fitted, so a cross-vendor transfer of
    #: fitted values keeps it; it is subtracted from each kernel's cost after ``efficiency.pdl_kernel_fraction``
    #: (a fitted share on top: B200's fit keeps 0.1674 of its per-kernel cost above 0.94 us). None: no PDL saving
    pdl_kernel_saving_us: Fact | None = None
    #: how ``efficiency``'s serving parameters were obtained (the confidence label of every answer)
    calibration: Calibration = Field(default_factory=Calibration)
    energy: Energy = Field(default_factory=Energy)
    #: chips sold/deployed together as one unit (8 for HGX, 72 for NVL72, 256 for LPX), for reports
    system_size: int = Field(default=1, ge=1)
    #: measured execution choices of the torch backend (probed local chips only)
    execution: Execution | None = None
    notes: list[str] = Field(default_factory=list)

    @field_validator("kernel_launch_us", "pdl_kernel_saving_us")
    @classmethod
    def _launch_is_a_chip_fact(cls, v: Fact | None) -> Fact | None:
        if v is not None and v.status == "fitted":
            raise ValueError("a chip fact (a launch measurement's per-kernel time, with its source), not a fitted "
                             "value: put a fitted per-kernel cost in efficiency.kernel_overhead_us (a fitted PDL "
                             "share in efficiency.pdl_kernel_fraction)")
        return v

    @property
    def launch_us(self) -> float:
        """The per-kernel launch gap the cost model charges on top of ``efficiency.kernel_overhead_us`` (0 when
        the chip does not state it)."""
        return float(self.kernel_launch_us) if self.kernel_launch_us is not None else 0.0

    @property
    def pdl_saving_us(self) -> float:
        """Per-kernel time PDL hides in a run launched with it (``pdl_kernel_saving_us``; 0 when not stated)."""
        return float(self.pdl_kernel_saving_us) if self.pdl_kernel_saving_us is not None else 0.0

    @field_validator("compute_tflops")
    @classmethod
    def _has_compute(cls, v: dict) -> dict:
        if not v:
            raise ValueError("at least one compute dtype is required")
        return v

    # ---- convenience accessors used by the cost model -------------------------------------------------
    def peak_flops(self, dtype: str) -> float:
        """Dense peak in FLOP/s for a native dtype, 0.0 if not native or unknown."""
        f = self.compute_tflops.get(dtype)  # type: ignore[call-overload]
        return float(f.value) * 1e12 if f is not None and f.value is not None else 0.0

    def level(self, name: str) -> MemoryLevel:
        for lv in self.memory:
            if lv.name == name:
                return lv
        raise KeyError(name)

    @property
    def main_memory(self) -> MemoryLevel | None:
        """The largest off-chip level (HBM/DRAM), or None for SRAM-only chips (Groq, Cerebras)."""
        off = [lv for lv in self.memory if lv.kind != "sram" and lv.capacity_gb.value]
        return max(off, key=lambda lv: float(lv.capacity_gb)) if off else None

    @property
    def kv_sram(self) -> MemoryLevel | None:
        """The largest on-chip SRAM level that can hold KV blocks (``kv_resident``), if any."""
        s = [lv for lv in self.memory if lv.kind == "sram" and lv.kv_resident and lv.capacity_gb.value]
        return max(s, key=lambda lv: float(lv.capacity_gb)) if s else None

    @property
    def sram(self) -> MemoryLevel | None:
        """The software-managed on-chip SRAM level, if the chip has one that can hold weights/KV."""
        s = [lv for lv in self.memory if lv.kind == "sram" and lv.resident and lv.capacity_gb.value]
        return max(s, key=lambda lv: float(lv.capacity_gb)) if s else None
