"""The cost model: time and energy of one engine step, operator by operator (roofline + network + overheads).

``op time = max(flops / (peak[dtype] * eff_c[dtype]), sum_level bytes_level / (bw_level * eff_m[level]))``
for compute/memory operators, ``latency + bytes / (bw * eff_net)`` for collectives (not overlapped), and
``step time = sum(op times) + overheads`` (per step, per layer, per MoE layer, per sequence, per layer of a
prefilling step, per prefill token; :func:`overhead_vector`). Energy = idle power x time +
work energy (pJ per FLOP / byte / network byte), capped at TDP x time, over the replica's chips.
See docs/cost-model.md for every equation and assumption.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate
from typing import Any

import numpy as np

from jalapeno._mypyc import mypyc_attr  # a compile-time hint (jalapeno build-native); plain Python: a no-op
from jalapeno.errors import CapacityError, ConfigError
from jalapeno.hardware.schema import ChipSpec, Efficiency
from jalapeno.models.arch import ModelArch
from jalapeno.perf import dtypes as dt
from jalapeno.perf.frameworks import VLLM_MEMORY
from jalapeno.perf.network import collective, p2p
from jalapeno.perf.ops import (
    IDX, NF, Dims, OpSpec, Routing, attention_dims, build_ops, features, kv_bytes_per_token_per_layer,
    linear_state_bytes_per_layer, vec,
)
from jalapeno.perf.shape import StepShape
from jalapeno.perf.types import KVTier, MemoryPlan, MemoryRule, OpCost, Parallelism, Precision, StepBreakdown, StepCost

#: the feature columns of a decode step's context sums (plain, windowed, and both per decode token)
_CTX_COLS = [IDX["C"], IDX["Cw"], IDX["Cr"], IDX["Cwr"]]
#: fraction of main memory (HBM/DRAM) the engine may use (vLLM's gpu_memory_utilization default): the
#: default :class:`MemoryRule` (weights, activations and KV within it); a serving framework's rule replaces it
MAIN_MEMORY_UTILIZATION = 0.9
DEFAULT_MEMORY_RULE = VLLM_MEMORY  # the same rule a vLLM framework profile carries
#: fraction of resident SRAM usable for weights/KV (compiled, statically scheduled: all of it)
SRAM_UTILIZATION = 1.0
#: when not all weights fit, the share of SRAM that pinned weights may take (the rest stages activations)
PINNED_SRAM_FRACTION = 0.9
#: fallback energy coefficients (pJ per byte) by memory kind, when the chip's energy block is empty
FALLBACK_PJ_PER_BYTE = {"sram": 2.0, "hbm": 25.0, "dram": 40.0}
FALLBACK_PJ_PER_NET_BYTE = 10.0
#: with no pJ/FLOP given, derive it so that running at peak draws this fraction of TDP
FALLBACK_COMPUTE_POWER_FRACTION = 0.7
#: pJ/FLOP when neither the energy block nor the TDP is known (then no TDP cap applies either)
FALLBACK_PJ_PER_FLOP_NO_TDP = 0.5
#: with no idle power given, assume this fraction of TDP
FALLBACK_IDLE_FRACTION = 0.2
#: sequences whose linear-attention state ``memory_plan`` reserves by default (the engine's max_num_seqs default)
DEFAULT_STATE_SEQS = 256
#: achievable fraction of a chip<->host link when KV blocks come back from the offload tier (measured: PCIe Gen5
#: x16 H2D 55.4 of 63 GB/s = 88% on an H200 node; NVLink-C2C ~80% unidirectional; hardware-facts reference)
OFFLOAD_LINK_EFFICIENCY = 0.85
#: host time per KV block a step's block tables reference, on a chip *without* an on-chip KV page table
#: (``ChipFeatures.kv_page_table`` switched off): the runtime writes/copies each block-table entry and the
#: attention kernel indirects through it. Inferred: ~2 ns per entry (a 128K-token sequence of 16-token blocks
#: = 8,192 entries = 16 us per step); the block size is the engine's default
PAGING_NS_PER_BLOCK = 2.0
PAGING_BLOCK_TOKENS = 16
#: host round trip per speculative verify step on a chip *without* a verify unit (``spec_verify_unit`` off):
#: one rejection-sampling kernel launch (~5 us) and the device-to-host sync of accepted lengths before the next
#: step can be scheduled (~15 us). Inferred
VERIFY_HOST_US = 20.0


def advance_decode(shape: StepShape, steps: int, window: int | None = None) -> StepShape:
    """The same decode batch ``steps`` steps later: every decode context grows by 1 per step; the windowed
    sum grows by ``decode_below_window`` per step, capped at ``decode_seqs * window``."""
    if steps == 0:
        return shape
    d = shape.decode_seqs
    if window:
        cw = min(shape.decode_ctx_sum_window + steps * shape.decode_below_window, d * window)
    else:
        cw = shape.decode_ctx_sum_window + steps * d
    return StepShape(
        decode_seqs=d,
        decode_tokens=shape.decode_tokens,
        decode_ctx_sum=shape.decode_ctx_sum + steps * d,
        decode_ctx_sum_window=cw,
        decode_below_window=shape.decode_below_window,
    )


#: collectives inside the layers whose per-token time a prefill can hide under compute (not the pipeline hand-off,
#: which sits between stages, nor the logits gather, which follows the last GEMM)
OVERLAPPABLE = frozenset({"embed_allreduce", "attn_allreduce", "mlp_allreduce", "moe_allreduce", "moe_dispatch",
                          "moe_combine"})


#: kernels of one layer's parts in a decode step (CUDA/HIP-graph decode, the fusions vLLM / SGLang / TRT-LLM ship):
#: the two fused residual-add + RMSNorm; attention: GQA = QKV GEMM, RoPE + KV-cache write, attention, output GEMM
#: (+1 per-head q/k norm); MLA = fused q_a/kv_a GEMM, q_a and kv_a norms, q_b GEMM, absorbed W_UK, RoPE + cache
#: write, MLA attention, absorbed W_UV, output GEMM (one fewer without a q LoRA); linear attention = in-projections,
#: conv, delta-rule recurrence, gated norm, output GEMM; dense MLP = gate/up GEMM, activation, down GEMM; MoE =
#: router GEMM, top-k, two grouped GEMMs, activation, combine (+ a dense MLP's three per shared-expert group);
#: one collective after attention and one after the MLP when the layer is split over chips; an MTP module's input
#: (``mtp_input``): the enorm and hnorm RMSNorms and the eh_proj GEMM (+ its all-reduce when split over chips)
KERNELS = {"norms": 2, "gqa": 4, "mla": 9, "linear": 5, "dense_mlp": 3, "moe": 6, "shared": 3, "collective": 1,
           "mtp_input": 3}
#: once per step: embedding, final norm, LM head
KERNELS_PER_STEP = 3


def kernel_count(m: ModelArch, tp: int = 1, ep: int = 1, mtp_draft: bool = False) -> int:
    """GPU kernels one decode step of ``m`` runs per chip (see :data:`KERNELS`): what ``kernel_overhead_us``
    multiplies. Counted from the architecture, so the per-kernel cost is a chip/stack value that holds across
    models (DeepSeek-R1: 1,327 at TP8; GPT-OSS-120B: 435 at TP1, 507 at TP2; Llama-3.1-8B: 291).
    ``mtp_draft``: ``m`` is an MTP module's block (:func:`jalapeno.perf.mtp.mtp_block_arch`): its input's
    kernels are added (one MTP draft pass of DeepSeek-R1 at TP8: 3 + 22 + 4 = 29)."""
    k = KERNELS
    coll = k["collective"] if tp > 1 or ep > 1 else 0
    total = KERNELS_PER_STEP + (k["mtp_input"] + coll if mtp_draft else 0)
    for i in range(m.num_layers):
        n = k["norms"] + 2 * coll
        if m.is_linear_layer(i):
            n += k["linear"]
        elif m.attention == "mla":
            n += k["mla"] - (0 if m.q_lora_rank else 1)
        else:
            n += k["gqa"] + (1 if m.qk_norm else 0)
        if m.is_moe_layer(i):
            n += k["moe"] + (k["shared"] if m.num_shared_experts else 0)
        else:
            n += k["dense_mlp"]
        total += n
    return total


def overhead_vector(eff: Efficiency, num_layers: int, moe_layers: int, experts_per_chip: float = 0.0,
                    kernels: int = 0, launch_us: float = 0.0, fp8_moe_layers: int = 0,
                    pdl: float = 0.0, pdl_saving_us: float = 0.0) -> np.ndarray:
    """Time (s) the fixed costs add to a step, as coefficients over :data:`~jalapeno.perf.ops.FEATURES`:
    per step, per layer, per MoE layer, per kernel of a step (``kernels``: :func:`kernel_count`), per routed expert run in a MoE layer (``Ue`` x experts per chip x MoE
    layers), per sequence in the step (``N``), per layer and per kernel of a step that prefills (``Pf``), per routed expert run
    in a MoE layer of a step that prefills (``Uep``, same scale) and per prefill token (``Tp``). Affine in the features, so ``decode_steps`` stays closed-form.
    Each kernel costs ``launch_us`` (the chip's graph-replay launch gap, ``ChipSpec.kernel_launch_us``: a chip
    fact) plus ``eff.kernel_overhead_us`` (the serving stack's fitted share). Each MoE layer whose routed experts
    are FP8 block-scaled (``fp8_moe_layers``) adds ``eff.fp8_moe_layer_overhead_us`` (the stack's FP8 MoE path).
    ``pdl``: the share of each kernel's cost hidden by Programmatic Dependent Launch (:func:`pdl_share`);
    ``pdl_saving_us``: the time PDL hides per kernel beyond that share (:func:`pdl_saving`, a chip fact; a
    kernel's cost never goes below 0)."""
    us = 1e-6
    fixed = eff.step_overhead_us + num_layers * eff.layer_overhead_us + moe_layers * eff.moe_layer_overhead_us
    fixed += fp8_moe_layers * eff.fp8_moe_layer_overhead_us
    return vec(
        one=(fixed + kernels * max(0.0, (launch_us + eff.kernel_overhead_us) * (1.0 - pdl) - pdl_saving_us)) * us,
        N=eff.seq_overhead_us * us,
        Pf=(num_layers * eff.prefill_layer_overhead_us + kernels * eff.prefill_kernel_overhead_us) * us,
        Ue=moe_layers * experts_per_chip * eff.expert_overhead_us * us,
        Uep=moe_layers * experts_per_chip * eff.prefill_expert_overhead_us * us,
        Tp=eff.prefill_token_overhead_ns * 1e-9,
    )


def pdl_share(eff: Efficiency) -> float:
    """The share of each decode kernel's cost that Programmatic Dependent Launch hides in this run:
    ``eff.pdl_kernel_fraction`` when the run launches with PDL (``eff.launch_pdl``), else 0."""
    return float(eff.pdl_kernel_fraction) if eff.launch_pdl else 0.0


def pdl_saving(chip, eff: Efficiency) -> float:
    """The time PDL hides per kernel in this run, microseconds: the chip's ``pdl_kernel_saving_us`` (a sourced
    chip fact) when the run launches with PDL (``eff.launch_pdl``), else 0."""
    return chip.pdl_saving_us if eff.launch_pdl else 0.0


#: the efficiency fields :func:`overhead_vector` reads (each enters the step time affinely)
_OVERHEAD_FIELDS = ("step_overhead_us", "layer_overhead_us", "moe_layer_overhead_us", "kernel_overhead_us",
                    "seq_overhead_us",
                    "prefill_layer_overhead_us", "expert_overhead_us", "prefill_expert_overhead_us",
                    "prefill_token_overhead_ns", "fp8_moe_layer_overhead_us", "prefill_kernel_overhead_us")


#: the softmax-attention operators (full and sliding-window layers; MLA's latent attention is ``attention``)
ATTENTION_OPS = ("attention", "attention_sliding")


#: the weight class (``perf.dtypes.LINEAR_CLASSES``) whose storage dtype a weight GEMM operator reads
WEIGHT_CLASS_OF_OP = {"moe_experts": "experts", "moe_shared": "shared", "mlp": "mlp", "qkv_proj": "attn",
                      "qkv_a_proj": "attn", "q_b_proj": "attn", "kv_b_proj": "attn", "o_proj": "attn"}


def expert_format(m: ModelArch, storage: dict[str, str]) -> str | None:
    """The routed experts' weight format (``efficiency.prefill_moe``'s key, ``hardware.schema.EXPERT_FORMATS``):
    their storage dtype, with 4-bit split into ``mxfp4`` (the model's native MXFP4 checkpoint: GPT-OSS) and
    ``nvfp4`` (a 4-bit checkpoint of a model stored wider: InferenceX's "fp4" DeepSeek-R1, NVFP4 on NVIDIA).
    None for a dense model."""
    if not m.num_experts:
        return None
    s = storage.get("experts")
    if s == "mxfp4":
        return "mxfp4" if dt._canon(m.native_weight_dtype) == "mxfp4" else "nvfp4"
    return s


def dequantizing_classes(storage: dict[str, str], compute: dict[str, str]) -> frozenset[str]:
    """Weight classes stored weight-only quantized (MXFP4, INT4) whose GEMMs run at a 16-bit compute dtype
    (the chip has no native rate for the storage format): their kernels dequantize every weight they read."""
    return frozenset(c for c, d in storage.items()
                     if d in ("mxfp4", "int4") and compute.get(c) in ("bf16", "fp16", "fp32"))


def decode_attention_s_per_key(m: ModelArch, d: Dims, ns: float) -> float:
    """Seconds ``efficiency.decode_attention_ns`` adds per context key of a decode query row: ``ns`` for each
    query head on the chip in each attention layer (linear-attention layers hold no keys)."""
    layers = sum(not m.is_linear_layer(i) for i in range(m.num_layers))
    return layers * d.q_heads * ns * 1e-9


def masked_prefill_pairs(shape: StepShape, fused_max_tokens: int = 0) -> float:
    """(query, key) pairs of the ``[chunk, context]`` rectangles a step's prefill chunks compute on the CPU torch
    backend's PyTorch attention path (paged gather + SDPA under an explicit mask, no causal block skipped): the
    chunks after cached tokens (a prompt's later chunk). Fresh prompts (from position 0) take the causal flash
    kernel on their own K/V, alone or beside decode rows and other chunks (``attention.grouped_attention``), so they
    add nothing; nor does a step of at most ``fused_max_tokens`` tokens (the fused kernel). A chunk of ``c`` tokens
    after ``p`` cached ones computes ``c·(p + c)`` = its causal pairs + ``c(c - 1)/2``; from the step's sums, with
    ``ps``/``pt`` the later chunks' count and tokens, that is ``P - Pf + ps·c̄(c̄ - 1)/2`` with ``c̄ = pt/ps`` and
    ``Pf`` the fresh prompts' causal pairs from their mean length (exact for equal chunks and equal prompts, the
    grid's case; otherwise ``c̄`` under-counts the rectangles and ``Pf`` the fresh pairs, errors of opposite sign).
    A shape that does not count its fresh chunks (``prefill_fresh_seqs`` 0) prices every chunk as a later one
    unless all start at 0 (``prefill_kv_tokens == prefill_tokens``)."""
    pt, ps = shape.prefill_tokens, shape.prefill_seqs
    if not pt or not ps or shape.tokens <= fused_max_tokens or shape.prefill_kv_tokens == pt:
        return 0.0
    ft, fs = shape.prefill_fresh_tokens, shape.prefill_fresh_seqs
    pt, ps = pt - ft, ps - fs
    if ps <= 0 or pt <= 0:
        return 0.0
    f = ft / fs if fs else 0.0
    c = pt / ps
    return shape.prefill_attn_pairs - fs * f * (f + 1.0) / 2.0 + ps * c * (c - 1.0) / 2.0


def rows_efficiency(table: dict[int, float], rows: np.ndarray) -> np.ndarray:
    """A GEMM's achieved fraction of peak compute at ``rows`` rows, from a measured ``compute_by_rows`` table
    (rows -> fraction): piecewise linear in log2(rows) between the measured row counts, clamped at both ends
    (below 1 row counts as 1)."""
    keys = sorted(table)
    return np.interp(np.log2(np.maximum(rows, 1.0)), np.log2(np.array(keys, dtype=np.float64)),
                     np.array([table[k] for k in keys], dtype=np.float64))


def overlapped_time(tc: np.ndarray, tm: np.ndarray, overlap: float) -> np.ndarray:
    """An operator's time when only ``overlap`` of the shorter of its compute (``tc``) and memory (``tm``) times
    hides under the longer: max(c, m) + (1 - overlap) x min(c, m) (1: the roofline max; 0: they add)."""
    return np.maximum(tc, tm) + (1.0 - overlap) * np.minimum(tc, tm)


#: the features a weight GEMM's rows are counted in (its FLOPs are linear in exactly one of them)
_GEMM_ROW_FEATURES = (IDX["T"], IDX["S"], IDX["Tm"])


def _cut(ts: list[float], es: list[float], start: float, stop: float | None) -> tuple[list[float], list[float]]:
    """``ts``, ``es`` up to the first step that ends at or after ``stop`` (ends ``start + d1``, ``+ d2``, ...
    summed one by one); all of them when ``stop`` is None or no step reaches it."""
    if stop is None:
        return ts, es
    run = min(len(ts), bisect_left(list(accumulate(ts, initial=start)), stop, 1))
    return ts[:run], es[:run]


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled: tests instrument it by subclassing
class CostModel:
    """Step time/energy of ``model`` on ``parallel.tp * parallel.pp`` chips of ``chip`` (one replica).

    A :class:`StepShape` describes the step of **one replica**; ``dp`` replicas run independent batches, so
    ``num_chips = tp*pp*dp`` is for reporting (per-chip throughput) while step energy covers the replica's
    ``tp*pp`` chips. ``sram_pinning=True`` pins part of the weights in a resident SRAM that cannot hold them all;
    ``None`` (default) takes the chip's resident SRAM level's ``pin_weights`` (False elsewhere: the
    all-or-nothing rule). Raises :class:`ConfigError` for an invalid sharding and
    :class:`CapacityError` when the weights do not fit.

    ``memory_rule`` (:class:`MemoryRule`): how the serving stack splits main memory between weights,
    activations and KV (None: :data:`DEFAULT_MEMORY_RULE`, vLLM's 0.9 of the total for all three).

    KV tiers (docs/cost-model.md): ``kv_sram_gb`` GB per chip of a ``kv_resident`` SRAM level hold KV (decode
    reads of the context they hold are priced at SRAM bandwidth; capacity adds up); ``kv_offload`` is a
    :class:`KVTier` below the chip (host DRAM, SSD) the engine may offload KV to (``kv_offload_tokens``,
    :meth:`kv_load_time_s`). ``chip_features=False`` switches the chip's :class:`ChipFeatures` off (their host
    work is added back). All three leave results unchanged at their defaults.
    """

    def __init__(
        self,
        model: ModelArch,
        chip: ChipSpec,
        parallel: Parallelism = Parallelism(),
        precision: Precision = Precision(),
        efficiency: Efficiency | None = None,
        *,
        sram_pinning: bool | None = None,
        kv_sram_gb: float = 0.0,
        kv_offload: KVTier | None = None,
        chip_features: bool = True,
        mtp_draft: bool = False,
        memory_rule: MemoryRule | None = None,
    ) -> None:
        self.model, self.chip, self.parallel, self.precision = model, chip, parallel, precision
        #: how the serving stack budgets main memory (weights / activations / KV)
        self.memory_rule = memory_rule if memory_rule is not None else DEFAULT_MEMORY_RULE
        #: this prices a multi-token-prediction draft pass (``model`` is the MTP block: jalapeno.perf.mtp)
        self.mtp_draft = mtp_draft
        if kv_sram_gb < 0:
            raise ConfigError(f"--kv-sram-gb must be >= 0 GB per chip (got {kv_sram_gb})")
        #: KV bytes per chip placed in on-chip SRAM (the fastest KV tier; 0 = the KV cache lives in main memory)
        self.kv_sram_bytes = kv_sram_gb * 1e9
        self.kv_offload = kv_offload
        self.chip_features = chip_features
        self.eff = efficiency if efficiency is not None else chip.efficiency
        if sram_pinning is None:
            sram_pinning = bool(chip.sram is not None and chip.sram.pin_weights)
        self.sram_pinning = sram_pinning
        self._validate()
        p = parallel
        self.num_chips = p.num_chips
        self.chips_per_replica = p.chips_per_replica
        self.weight_dtypes = dt.weight_dtypes(model, precision)
        wbytes = {c: dt.weight_bytes_per_element(d, model) for c, d in self.weight_dtypes.items()}
        cdt = {c: dt.compute_dtype(chip, d) for c, d in self.weight_dtypes.items()}
        full = precision.weights == "fp32"  # float32 throughout (the torch backend on CPU)
        cdt["attn_math"] = dt.compute_dtype(chip, "fp32") if full else dt.attention_dtype(chip)
        cdt["bf16"] = dt.compute_dtype(chip, "fp32" if full else "bf16")
        self.compute_dtypes = cdt
        self._dequant_classes = dequantizing_classes(self.weight_dtypes, cdt)
        self.kv_bytes_per_element = dt.kv_bytes_per_element(precision.kv)
        self.act_bytes = 4.0 if full else 2.0
        wbytes["head"] = 4.0 if full else 2.0  # embedding, LM head and final norm
        desc = f" (tp={p.tp})"
        ar = collective(chip, self.eff, p.tp, "allreduce", desc)
        ag = collective(chip, self.eff, p.tp, "allgather", desc)
        a2a = collective(chip, self.eff, p.tp, "alltoall", desc)
        coll = {
            "tp_allreduce": (ar.latency_s, ar.s_per_byte, ar.sent_per_byte),
            "tp_allgather_rs": (ar.latency_s, ar.s_per_byte, ar.sent_per_byte),  # all-gather + reduce-scatter
            "tp_allgather": (ag.latency_s, ag.s_per_byte, ag.sent_per_byte),
            "ep_alltoall": (a2a.latency_s, a2a.s_per_byte, a2a.sent_per_byte),
        }
        ops = build_ops(
            model, tp=p.tp, ep=p.ep, dp_attention=p.dp_attention, wbytes=wbytes, wdtype=cdt,
            expert_slots=p.expert_slots(model.num_experts),
            kvb=self.kv_bytes_per_element, actb=self.act_bytes, coll=coll, mtp_draft=mtp_draft,
        )
        ops += self._pipeline_ops()
        self._dims = attention_dims(model, p.tp, p.dp_attention)
        self._stages = self._stage_layers(ops)
        self._place(ops)
        self.kv_bytes_per_chip_token = self._kv_bytes_per_chip_token()
        holders = p.tp if p.dp_attention else 1
        #: replica KV tokens whose KV fits the SRAM tier (0 without ``kv_sram_gb``)
        self.kv_sram_tokens = int(self.kv_sram_bytes // self.kv_bytes_per_chip_token) * holders \
            if self.kv_sram_bytes else 0
        self.kv_offload_tokens = int(kv_offload.capacity_gb * 1e9 // self.kv_bytes_per_chip_token) * holders \
            if kv_offload is not None else 0
        feats = chip.features
        #: what switching the chip's features off costs (0 when it has none, or they are on)
        self._verify_s = VERIFY_HOST_US * 1e-6 if feats.spec_verify_unit and not chip_features else 0.0
        self._paging_s_per_token = PAGING_NS_PER_BLOCK * 1e-9 / PAGING_BLOCK_TOKENS \
            if feats.kv_page_table and not chip_features else 0.0
        self._compile(ops)
        self.expert_slots = p.expert_slots(model.num_experts)
        #: the features' routing statistics (a test may swap in the balanced model's plain 1 - k/E)
        self._routing: Routing | float = Routing.of(model.num_experts, model.experts_per_token, p.ep,
                                                    self.expert_slots)

    # ------------------------------------------------------------------ validation & placement
    def _validate(self) -> None:
        m, p = self.model, self.parallel
        if not any(self.chip.peak_flops(d) > 0 for d in self.chip.compute_tflops):
            raise ConfigError(f"{self.chip.key}: no compute rate is known; fill compute_tflops in its hardware file")
        if not p.dp_attention:
            if m.num_heads % p.tp:
                raise ConfigError(
                    f"tp={p.tp} must divide num_heads={m.num_heads} of {m.name}; pick tp among its divisors"
                )
            for key in ("linear_num_key_heads", "linear_num_value_heads"):
                if getattr(m, key) % p.tp:
                    raise ConfigError(
                        f"tp={p.tp} must divide {key}={getattr(m, key)} of {m.name} (linear-attention heads are "
                        "split over tp ranks); pick tp among its divisors"
                    )
            if m.attention == "gqa" and m.num_kv_heads % p.tp and p.tp % m.num_kv_heads:
                raise ConfigError(
                    f"tp={p.tp} and num_kv_heads={m.num_kv_heads} of {m.name}: one must divide the other "
                    "(kv heads are split, or replicated when tp > kv heads)"
                )
        if p.ep > 1 and m.num_experts == 0:
            raise ConfigError(f"ep={p.ep} but {m.name} is a dense model (no experts); use ep=1")
        if m.num_experts and p.ep > m.num_experts:
            raise ConfigError(f"ep={p.ep} exceeds num_experts={m.num_experts} of {m.name}; use ep <= {m.num_experts}")
        if p.pp > m.num_layers:
            raise ConfigError(
                f"pp={p.pp} exceeds num_layers={m.num_layers} of {m.name}; use at most one stage per layer"
            )

    def _stage_layers(self, ops: list[OpSpec]) -> list[range]:
        """Contiguous pipeline stages (>= 1 layer each) that minimise the fullest chip's weight bytes, counting
        the embedding on the first stage and the LM head on the last (like vLLM's VLLM_PP_LAYER_PARTITION)."""
        L, pp = self.model.num_layers, self.parallel.pp
        if pp == 1:
            return [range(L)]
        w = [0.0] * L
        first = last = 0.0
        for o in ops:
            for i in o.layer_ids:
                w[i] += o.stored
            if o.stage == "first":
                first += o.stored
            elif o.stage == "last":
                last += o.stored

        def split(cap: float, even: bool = False) -> list[range] | None:
            out, i = [], 0
            for st in range(pp):
                budget = cap - (first if st == 0 else 0.0) - (last if st == pp - 1 else 0.0)
                j, used = i, 0.0
                stop = L if st == pp - 1 else L - (pp - st - 1)
                if even and st < pp - 1:  # an even share of the layers the last stage cannot take
                    stop = min(stop, i + math.ceil((L - i - tail) / (pp - st - 1)))
                while j < stop and (j == i or used + w[j] <= budget):
                    used += w[j]
                    j += 1
                if used > budget + 1e-6 * cap:
                    return None
                out.append(range(i, j))
                i = j
            return out if i == L else None

        lo, hi = max(w), sum(w) + first + last
        best = split(hi)
        for _ in range(60):
            mid = (lo + hi) / 2
            got = split(mid)
            if got is None:
                lo = mid
            else:
                hi, best = mid, got
        assert best is not None
        # within that bound, prefer even layer counts (balanced stage times) when the greedy allows it
        tail, used = 0, last
        while tail < L - (pp - 1) and used + w[L - 1 - tail] <= hi * (1 + 1e-9):
            used += w[L - 1 - tail]
            tail += 1
        tail = max(tail, 1)
        return split(hi, even=True) or best

    def _pipeline_ops(self) -> list[OpSpec]:
        p, chip = self.parallel, self.chip
        if p.pp == 1:
            return []
        dom = chip.scale_up.domain_size or 10**9
        stages_per_domain = max(1, dom // p.tp)
        cross = math.ceil(p.pp / stages_per_domain) - 1 if p.tp * p.pp > dom else 0
        if cross and chip.scale_out is None:
            raise ConfigError(
                f"tp*pp={p.tp * p.pp} chips exceed the {chip.key} scale-up domain of {dom} and the chip has no "
                "scale-out network; use fewer pipeline stages"
            )
        msg = vec(T=self.model.hidden_size * self.act_bytes)  # every rank forwards the full activations
        lat = bpb = sent = 0.0
        for crosses, n in ((False, p.pp - 1 - cross), (True, cross)):
            c = p2p(chip, self.eff, crosses)
            lat += n * c.latency_s
            bpb += n * c.s_per_byte
            sent += n * c.sent_per_byte
        return [OpSpec("pp_handoff", "network", p.pp - 1, "", p.tp, net_bytes=msg * sent,
                       net_time=msg * bpb + vec(one=lat))]

    def _stage_bytes(self, o: OpSpec) -> list[float]:
        """Weight bytes one chip of each pipeline stage stores for operator ``o``."""
        last = len(self._stages) - 1
        out = []
        for si, rng in enumerate(self._stages):
            if o.layer_ids:
                out.append(o.stored * sum(1 for i in o.layer_ids if rng.start <= i < rng.stop))
            else:
                out.append(o.stored if (o.stage == "first" and si == 0) or (o.stage == "last" and si == last) else 0.0)
        return out

    def _capacity_error(self, need: float, have: float, where: str) -> CapacityError:
        p = self.parallel
        return CapacityError(
            f"does not fit: needs {need / 1e9:.1f} GB per chip, has {have / 1e9:.1f} GB {where} "
            f"(model {self.model.name} weights {self.precision.weights} on {p.chips_per_replica}x{self.chip.key}, "
            f"{p.describe()}); try more chips (tp/pp), a smaller weight dtype (fp8, fp4) or a chip with more memory"
        )

    def _place(self, ops: list[OpSpec]) -> None:
        """Decide where each operator's weights live (symbolic level "WS" = resident SRAM, "W" = main memory).

        All weights go to SRAM when they fit. With ``sram_pinning`` on chips with SRAM *and* main memory, the
        weights are otherwise pinned per operator, always-read weights first (attention, dense MLP, shared
        experts, router, LM head), then the routed experts, the embedding table last, within
        ``PINNED_SRAM_FRACTION`` of the SRAM."""
        chip = self.chip
        per_op = [self._stage_bytes(o) for o in ops]
        n_st = len(self._stages)
        stored = [sum(b[s] for b in per_op) for s in range(n_st)]
        self.weight_bytes_per_chip = max(stored)
        main, sram = chip.main_memory, chip.sram
        sram_cap = float(sram.capacity_gb) * 1e9 * SRAM_UTILIZATION if sram else 0.0
        kvs = self._kv_sram_level(main)
        if kvs is not None and kvs is sram:
            sram_cap -= self.kv_sram_bytes  # the KV tier's share is not for weights
        pinned = [False] * len(ops)
        if sram is not None and self.weight_bytes_per_chip <= sram_cap:
            pinned = [o.stored > 0 for o in ops]
        elif main is None:
            raise self._capacity_error(self.weight_bytes_per_chip, sram_cap, "of on-chip SRAM")
        elif sram is not None and self.sram_pinning:
            budget = sram_cap * PINNED_SRAM_FRACTION
            used = [0.0] * n_st

            def rank(j: int) -> int:
                o = ops[j]
                return 2 if o.stage == "first" else 1 if o.name == "moe_experts" else 0

            for j in sorted((j for j, o in enumerate(ops) if o.stored > 0), key=rank):
                if all(used[s] + per_op[j][s] <= budget for s in range(n_st)):
                    pinned[j] = True
                    used = [used[s] + per_op[j][s] for s in range(n_st)]
        for j, o in enumerate(ops):
            if pinned[j] and "W" in o.bytes:
                o.bytes["WS"] = o.bytes.pop("W")
                if o.time_bytes is not None:
                    o.time_bytes["WS"] = o.time_bytes.pop("W")
        self.weights_in_sram = all(pinned[j] for j, o in enumerate(ops) if o.stored > 0)
        self.sram_weight_bytes_per_chip = max(
            sum(per_op[j][s] for j in range(len(ops)) if pinned[j]) for s in range(n_st)
        )
        self.main_weight_bytes_per_chip = max(
            sum(per_op[j][s] for j in range(len(ops)) if not pinned[j]) for s in range(n_st)
        )
        if main is not None:
            cap = self.memory_rule.weight_cap(float(main.capacity_gb) * 1e9)
            if self.main_weight_bytes_per_chip > cap:
                raise self._capacity_error(self.main_weight_bytes_per_chip, cap, f"of {main.name}")
        kv_level = main if main is not None else sram
        a_level = sram if sram is not None else main
        assert kv_level is not None and a_level is not None
        #: symbolic level -> memory level (Any: typed, every use would need the None case mypy cannot rule out)
        self.levels: dict[str, Any] = {"W": main if main is not None else sram,
                                       "WS": sram if sram is not None else main, "KV": kv_level, "A": a_level}
        if kvs is not None:
            self.levels["KVS"] = kvs

    def _kv_sram_level(self, main):
        """The SRAM level holding ``kv_sram_bytes`` of KV per chip (None when the run places none there)."""
        if not self.kv_sram_bytes:
            return None
        chip = self.chip
        if main is None:
            raise ConfigError(f"{chip.key} keeps its KV cache in SRAM already (it has no off-chip memory); "
                              "drop --kv-sram-gb")
        lv = chip.kv_sram
        if lv is None:
            raise ConfigError(f"{chip.key} has no SRAM level that software can place KV blocks in (kv_resident in "
                              "its hardware file); drop --kv-sram-gb, or mark the level kv_resident: true")
        cap = float(lv.capacity_gb)
        if self.kv_sram_bytes > cap * 1e9 * SRAM_UTILIZATION:
            raise ConfigError(f"--kv-sram-gb {self.kv_sram_bytes / 1e9:g} exceeds the {cap:g} GB of {chip.key}'s "
                              f"{lv.name}; use at most {cap:g}")
        return lv

    def _kv_bytes_per_chip_token(self) -> float:
        """KV bytes one token occupies on one chip of the fullest pipeline stage (all its KV layers)."""
        m = self.model
        per_layer = kv_bytes_per_token_per_layer(m, self._dims, self.kv_bytes_per_element)
        return per_layer * max(sum(not m.is_linear_layer(i) for i in r) for r in self._stages)

    def kv_load_time_s(self, tokens: int) -> float:
        """Seconds to bring ``tokens`` KV tokens (of one replica) back from the offload tier: bytes per chip over
        the tier's bandwidth (``OFFLOAD_LINK_EFFICIENCY`` of it); the replica's chips load their shares at once."""
        t = self.kv_offload
        if t is None or not tokens:
            return 0.0
        per_chip = tokens / (self.parallel.tp if self.parallel.dp_attention else 1)
        return per_chip * self.kv_bytes_per_chip_token / (t.bandwidth_gbps * 1e9 * OFFLOAD_LINK_EFFICIENCY)

    # ------------------------------------------------------------------ compile to matrices
    def _rate(self, dtype: str) -> float:
        d = dtype or self.compute_dtypes["attn_math"]
        return self.chip.peak_flops(d) * self.eff.compute.get(d, self.eff.compute_default)

    def _bw(self, sym: str) -> float:
        lv = self.levels[sym]
        bw = float(lv.bandwidth_tbps) * 1e12 * self.eff.memory.get(lv.name, self.eff.memory_default)
        if bw <= 0:
            raise ConfigError(
                f"{self.chip.key}: bandwidth of memory level {lv.name!r} is unknown; fill it in the hardware file"
            )
        return bw

    def _pj_flop(self, dtype: str) -> float:
        d = dtype or self.compute_dtypes["attn_math"]
        e = self.chip.energy.pj_per_flop.get(d)
        if e is not None:
            return e
        tdp = float(self.chip.power.tdp_w)
        if tdp <= 0:
            return FALLBACK_PJ_PER_FLOP_NO_TDP
        return FALLBACK_COMPUTE_POWER_FRACTION * tdp / self.chip.peak_flops(d) * 1e12

    def _pj_byte(self, sym: str) -> float:
        lv = self.levels[sym]
        e = self.chip.energy.pj_per_byte.get(lv.name)
        return e if e is not None else FALLBACK_PJ_PER_BYTE[lv.kind]

    def _compile(self, ops: list[OpSpec]) -> None:
        eff = self.eff
        self._ops = ops
        work = [o for o in ops if o.kind == "work"]
        net = [o for o in ops if o.kind == "network"]
        self._work, self._net = work, net
        tc = np.array([self._compute_time(o) + self._dequant_time(o) for o in work])
        tm = np.array([sum((c / self._bw(s) for s, c in (o.bytes if o.time_bytes is None else o.time_bytes).items()),
                           np.zeros(NF)) for o in work])
        self._net_time = [self._overlapped(o) for o in net]
        m = self.model
        self.kernels = kernel_count(m, self.parallel.tp, self.parallel.ep, self.mtp_draft)
        #: the host floor of a step that prefills (``efficiency.prefill_host_kernel_us`` x the step's kernels, the
        #: count ``kernel_overhead_us`` multiplies): such a step lasts max(this, its device time); 0 = none
        self.prefill_host_s = eff.prefill_host_kernel_us * 1e-6 * self.kernels
        self._overhead = overhead_vector(eff, m.num_layers, self._moe_layers(),
                                         m.num_experts / self.parallel.ep if m.num_experts else 0.0, self.kernels,
                                         self.chip.launch_us, self._fp8_moe_layers(), pdl_share(eff),
                                         pdl_saving(self.chip, eff))
        self._overhead = self._overhead + self._prefill_attention_fixed(work) + self._prefill_moe_fixed(work)
        if self._paging_s_per_token:  # host paging: every context block of the step's block tables
            self._overhead = self._overhead + vec(C=self._paging_s_per_token, K=self._paging_s_per_token)
        if eff.decode_attention_ns:  # a CPU attention kernel's per (head, key, layer) cost of each decode row
            self._overhead = self._overhead + vec(Cr=decode_attention_s_per_key(m, self._dims, eff.decode_attention_ns))
        #: seconds per (query, key) pair of a prefill chunk on the CPU PyTorch attention path (0: no such term)
        self._masked_s = decode_attention_s_per_key(m, self._dims, eff.masked_prefill_attention_ns)
        ex = self.chip.execution
        self._fused_max = int(ex.fused_max_batch.value or 0) if self._masked_s and ex is not None else 0
        #: seconds a step on the CPU torch backend's PyTorch (unfused) path adds — more tokens than the fused
        #: crossover ``_unfused_above`` (``execution.fused_max_batch``; 0: no fused kernel, every step) — its layers
        #: times ``efficiency.unfused_layer_overhead_us`` (0: no such term, every catalogue chip)
        self._unfused_s = m.num_layers * eff.unfused_layer_overhead_us * 1e-6
        self._unfused_above = int(ex.fused_max_batch.value or 0) if ex is not None else 0
        lin = sum(self._net_time, np.zeros(NF)) + self._overhead
        pj_net = self.chip.energy.pj_per_network_byte or FALLBACK_PJ_PER_NET_BYTE
        e_work = np.zeros(NF)
        fl = np.zeros(NF)
        by = np.zeros(NF)
        for o in ops:
            e_op = o.flops * self._pj_flop(o.dtype) + o.net_bytes * pj_net
            for s, c in o.bytes.items():
                e_op = e_op + c * self._pj_byte(s)
                by = by + c * o.mult
            e_work = e_work + e_op * o.mult * 1e-12
            fl = fl + o.flops * o.mult
        self._n = len(work)
        self._M = np.vstack([tc, tm, lin, e_work, fl, by])
        if self.kv_sram_tokens:  # two more columns: decode KV read from the SRAM tier instead of main memory
            ext = self._sram_tier_columns(work, ops)
            self._M = np.hstack([self._M, ext])
            tc = np.hstack([tc, np.zeros((len(work), 2))])
            tm = np.hstack([tm, ext[len(work) : 2 * len(work)]])
            self._M_ext = np.ascontiguousarray(ext)
        self._M_ctx = np.ascontiguousarray(self._M[:, _CTX_COLS])  # rows' slopes in the context features
        self._slopes: dict[tuple[int, float, float], list[float]] = {}  # memo of _ctx_slopes
        self._terms: dict[int, tuple[float, float, float]] = {}  # memo of ops.routing_terms by step tokens
        self._terms_of: object = None  # ... for this routing (set at the first _x)
        self._tc, self._tm = tc, tm
        self._compile_rows(work)
        tdp = float(self.chip.power.tdp_w)
        idle = float(self.chip.power.idle_w) if self.chip.power.idle_w and self.chip.power.idle_w.value else None
        self.idle_w = idle if idle is not None else FALLBACK_IDLE_FRACTION * tdp
        self.tdp_w = tdp if tdp > 0 else math.inf  # the cap; unknown TDP = no cap
        self._pj_net = pj_net

    def _compute_time(self, o: OpSpec) -> np.ndarray:
        """Compute-side seconds (coefficients over the features) of work operator ``o``: its (time) FLOPs at its
        dtype's rate, except the routed experts' grouped GEMMs at ``efficiency.moe_compute`` (when it lists the
        dtype) and a prefill chunk's attention pairs (``P``, ``Pw``) at ``efficiency.prefill_attention_compute``
        (when set); decode attention and every other operator keep the dtype's ``compute`` fraction."""
        fl = o.flops if o.time_flops is None else o.time_flops
        eff = self.eff
        d = o.dtype or self.compute_dtypes["attn_math"]
        frac = eff.moe_compute.get(d) if o.name == "moe_experts" else None
        t = fl / (self.chip.peak_flops(d) * frac) if frac else fl / self._rate(o.dtype)
        if eff.prefill_attention_compute is not None and o.name in ATTENTION_OPS:
            t = t.copy()
            for k in ("P", "Pw"):
                t[IDX[k]] = fl[IDX[k]] / (self.chip.peak_flops(d) * eff.prefill_attention_compute)
        return t

    def _prefill_attention_fixed(self, work: list[OpSpec]) -> np.ndarray:
        """Seconds (coefficients) the context-attention kernel adds beyond its FLOPs in a step that prefills:
        ``prefill_attention_ns_per_query_head`` per (prefill token, query head on this chip, softmax-attention
        layer) and ``prefill_attention_layer_us`` per such layer (``Pf``)."""
        eff = self.eff
        if not (eff.prefill_attention_ns_per_query_head or eff.prefill_attention_layer_us):
            return np.zeros(NF)
        layers = sum(o.layers for o in work if o.name in ATTENTION_OPS)
        heads = self._dims.q_heads / self._dims.att_split  # query heads x share of the prefill tokens per chip
        return vec(Tp=eff.prefill_attention_ns_per_query_head * 1e-9 * heads * layers,
                   Pf=eff.prefill_attention_layer_us * 1e-6 * layers)

    def _prefill_moe_fixed(self, work: list[OpSpec]) -> np.ndarray:
        """Seconds (coefficients) the measured prefill MoE op of the experts' format
        (``efficiency.prefill_moe[expert_format]``) adds in a step that prefills, per MoE layer: ``layer_us``
        (``Pf``), ``expert_us`` per expert on the busiest rank as the step touches them (``Uep``), ``token_ns`` per
        prefill token on this chip (``Tp`` / attention DP split) and, at ``compute``, the routed GEMMs' prefill
        FLOPs (per token of the busiest rank) re-priced from the roofline's rate to that fraction of the dtype's
        peak (``Tp``; never below the roofline's). Zero when the chip lists no entry for the format."""
        k = self.eff.prefill_moe.get(expert_format(self.model, self.weight_dtypes) or "")
        layers = self._moe_layers()
        if k is None or not layers:
            return np.zeros(NF)
        per_chip = self.model.num_experts / self.parallel.ep
        v = vec(Pf=k.layer_us * 1e-6 * layers, Uep=k.expert_us * 1e-6 * layers * per_chip,
                Tp=k.token_ns * 1e-9 * layers / self._dims.att_split)
        for o in work if k.compute else ():
            if o.name != "moe_experts":
                continue
            fl = o.flops if o.time_flops is None else o.time_flops
            per_token = float(fl[IDX["T"]] + fl[IDX["Tm"]])  # every MoE layer's routed FLOPs per token
            d = o.dtype or self.compute_dtypes["attn_math"]
            used = self.eff.moe_compute.get(d)
            rate = self.chip.peak_flops(d) * used if used else self._rate(o.dtype)
            inv = 1.0 / (self.chip.peak_flops(d) * k.compute)  # type: ignore[operator]
            v = v + vec(Tp=max(0.0, per_token * (inv - 1.0 / rate)))
        return v

    def _dequant_time(self, o: OpSpec) -> np.ndarray | float:
        """Compute-side seconds (coefficients over the features) of dequantizing ``o``'s weights: its weight bytes
        read (the busiest rank's under expert parallelism) x ``efficiency.weight_dequant_ps_per_byte``, when its
        weight class is stored weight-only quantized (:func:`dequantizing_classes`); else 0."""
        ps = self.eff.weight_dequant_ps_per_byte
        if not ps or WEIGHT_CLASS_OF_OP.get(o.name) not in self._dequant_classes:
            return 0.0
        w = (o.bytes if o.time_bytes is None else o.time_bytes).get("W")
        return 0.0 if w is None else w * ps * 1e-12

    def _sram_tier_columns(self, work: list[OpSpec], ops: list[OpSpec]) -> np.ndarray:
        """Coefficients of the two SRAM-tier features (``Cs``: decode context tokens whose KV sits in SRAM,
        ``Cws``: the same share of the windowed sum) for every matrix row: each moves its KV bytes from the
        main-memory level to the SRAM level, so memory time changes by 1/bw_sram - 1/bw_main per byte and
        energy by pJ_sram - pJ_main; FLOPs and total bytes do not change."""
        n = len(work)
        d_inv = 1.0 / self._bw("KVS") - 1.0 / self._bw("KV")
        d_pj = (self._pj_byte("KVS") - self._pj_byte("KV")) * 1e-12
        iC, iCw = IDX["C"], IDX["Cw"]

        def cols(by: dict) -> np.ndarray:
            kv = by.get("KV")
            return np.zeros(2) if kv is None else np.array([kv[iC], kv[iCw]])

        ext = np.zeros((2 * n + 4, 2))
        for j, o in enumerate(work):
            ext[n + j] = cols(o.bytes if o.time_bytes is None else o.time_bytes) * d_inv
        ext[2 * n + 1] = sum((cols(o.bytes) * o.mult for o in ops), np.zeros(2)) * d_pj
        return ext

    def _compile_rows(self, work: list[OpSpec]) -> None:
        """The small-M terms (``efficiency.compute_by_rows``, ``compute_memory_overlap``; docs/cost-model.md), set
        only on probed chips. With either present every step takes the general path (:meth:`_rows_times`), never
        the closed-form decode line. A weight GEMM is a work operator with a compute dtype whose (time) FLOPs are
        linear in one row feature (T, S or Tm): its compute time is rescaled from the fraction :meth:`_rate`
        used to the table's fraction at that many rows."""
        eff = self.eff
        self._small_m = eff.compute_by_rows is not None or eff.compute_memory_overlap is not None
        self._overlap = 1.0 if eff.compute_memory_overlap is None else float(eff.compute_memory_overlap)
        idx: list[int] = []
        feat: list[int] = []
        base: list[float] = []
        for j, o in enumerate(work if eff.compute_by_rows is not None else ()):
            fl = o.flops if o.time_flops is None else o.time_flops
            nz = np.flatnonzero(fl[:NF])
            weights = "W" in o.bytes or "WS" in o.bytes  # main memory, or pinned in SRAM by _place
            if not o.dtype or len(nz) != 1 or int(nz[0]) not in _GEMM_ROW_FEATURES or not weights:
                continue
            idx.append(j)
            feat.append(int(nz[0]))
            moe = eff.moe_compute.get(o.dtype) if o.name == "moe_experts" else None  # the fraction tc was priced at
            base.append(moe or eff.compute.get(o.dtype, eff.compute_default))
        self._gemm_idx = np.array(idx, dtype=np.int64)
        self._gemm_feat = np.array(feat, dtype=np.int64)
        self._gemm_base = np.array(base, dtype=np.float64)

    def _rows_times(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Step times of the feature rows ``X`` (``Y = X @ M.T``) with the small-M terms: each weight GEMM's compute
        time at its rows' efficiency, every operator's compute and memory combined by :func:`overlapped_time`."""
        n = self._n
        tc = Y[:, :n]
        if self._gemm_idx.size:
            assert self.eff.compute_by_rows is not None
            tc = tc.copy()
            fr = rows_efficiency(self.eff.compute_by_rows, X[:, self._gemm_feat])
            tc[:, self._gemm_idx] *= self._gemm_base / fr
        return overlapped_time(tc, Y[:, n : 2 * n], self._overlap).sum(axis=1) + Y[:, 2 * n]

    def _step_rows(self, shape: StepShape) -> StepCost:
        """:meth:`step` with the small-M terms (the general path)."""
        x = self._x(shape)
        y = self._M.dot(x)
        t = float(self._rows_times(x[None, :], y[None, :])[0])
        if self._verify_s or self._masked_s or self._unfused_s:
            t = self._plus_step_extras(t, shape)
        if shape.prefill_tokens and t < self.prefill_host_s:  # an eager prefill the host cannot issue faster
            t = self.prefill_host_s
        n = self._n
        nc = self.chips_per_replica
        e = min(float(y[2 * n + 1]) + self.idle_w * t * nc, self.tdp_w * t * nc)
        return StepCost(t, e, float(y[2 * n + 2]), float(y[2 * n + 3]))

    def _plus_step_extras(self, t: float, shape: StepShape) -> float:
        """``t`` plus what a step adds outside the operator matrix: the speculative verify pass's host cost (a step
        that verifies drafts), the CPU PyTorch path's masked prefill attention (a step that prefills) and that
        path's per-layer host cost (a step past the fused crossover: ``efficiency.unfused_layer_overhead_us``)."""
        if self._verify_s and shape.decode_tokens > shape.decode_seqs:
            t += self._verify_s
        if self._masked_s and shape.prefill_tokens:
            t += self._masked_s * masked_prefill_pairs(shape, self._fused_max)
        if self._unfused_s and shape.tokens > self._unfused_above:
            t += self._unfused_s
        return t

    def op_times(self, shape: StepShape) -> tuple[np.ndarray, np.ndarray, float]:
        """The parts a step's time is combined from: each work operator's compute time (s; a weight GEMM's at its
        rows' ``compute_by_rows`` efficiency when the chip has that table) and memory time, and the time that adds
        as it is (collectives, overheads). The probe fits ``compute_memory_overlap`` on these."""
        x = self._x(shape)
        y = self._M.dot(x)
        n = self._n
        tc = y[:n].copy()
        if self._gemm_idx.size:
            assert self.eff.compute_by_rows is not None
            tc[self._gemm_idx] *= self._gemm_base / rows_efficiency(self.eff.compute_by_rows, x[self._gemm_feat])
        return tc, y[n : 2 * n].copy(), float(y[2 * n])

    def _op_rows_time(self, j: int, x: np.ndarray, tc: float, tm: float) -> tuple[float, float]:
        """Operator ``j``'s (compute time, time) in one step with the small-M terms (for :meth:`breakdown`)."""
        hit = np.flatnonzero(self._gemm_idx == j)
        if hit.size:
            assert self.eff.compute_by_rows is not None
            g = int(hit[0])
            fr = rows_efficiency(self.eff.compute_by_rows, np.array([x[self._gemm_feat[g]]]))[0]
            tc = tc * float(self._gemm_base[g]) / float(fr)
        return tc, float(overlapped_time(np.array(tc), np.array(tm), self._overlap))

    def _tier_x(self, shape: StepShape) -> tuple[float, float]:
        """The SRAM-tier features of a step: decode context tokens in SRAM (blocks fill the fastest tier
        first, so min(C, S) of the batch's C context tokens) and the windowed sum's same share."""
        c = shape.decode_ctx_sum
        if not c:
            return 0.0, 0.0
        cs = min(c, self.kv_sram_tokens)
        return float(cs), shape.decode_ctx_sum_window * (cs / c)

    def _moe_layers(self) -> int:
        m = self.model
        return sum(1 for i in range(m.num_layers) if m.is_moe_layer(i)) if m.num_experts else 0

    def _fp8_moe_layers(self) -> int:
        """MoE layers whose routed experts are stored as FP8 (block-scaled) weights: what
        ``efficiency.fp8_moe_layer_overhead_us`` multiplies."""
        return self._moe_layers() if self.weight_dtypes.get("experts") == "fp8" else 0

    def _overlapped(self, o: OpSpec) -> np.ndarray:
        """``o``'s time coefficients with ``prefill_collective_overlap`` applied: a layer collective's per-token
        term ``T`` is split into its decode part (``Td``, exposed) and its prefill part (``Tp``, scaled by
        ``1 - overlap``: that share runs under the GEMMs of the same prefill). Latency terms stay exposed.
        A chip's ``collective_engine`` hides ``overlap`` of every token's term (decode too) and keeps
        ``latency_factor`` of the latency."""
        ov = self.eff.prefill_collective_overlap
        cae = self.chip.collective_engine
        if o.name not in OVERLAPPABLE or not (ov or cae):
            return o.net_time
        v = o.net_time.copy()
        c = v[IDX["T"]]
        v[IDX["T"]] = 0.0
        hide = float(cae.overlap) if cae else 0.0
        v[IDX["Td"]] += c * (1.0 - hide)
        v[IDX["Tp"]] += c * (1.0 - max(ov, hide))
        if cae:
            v[IDX["one"]] *= float(cae.latency_factor)
        return v

    # ------------------------------------------------------------------ public API
    @property
    def weight_location(self) -> str:
        """Memory level the weights are read from ("sram" when all are resident, else main memory)."""
        return self.levels["WS" if self.weights_in_sram else "W"].name

    def _x(self, shape: StepShape) -> np.ndarray:
        """The step's features as an array: :func:`features` (memoised per routing) and the KV tiers' ones."""
        ro = self._routing
        if self._terms_of is not ro:  # the memo belongs to one routing (tests swap it for the balanced one)
            self._terms, self._terms_of = {}, ro
        x = features(shape, ro, self._terms)
        if self.kv_sram_tokens:
            x.extend(self._tier_x(shape))
        return np.fromiter(x, np.float64, len(x))  # np.array(x, dtype=np.float64), a little cheaper

    def features(self, shape: StepShape) -> np.ndarray:
        """The step's feature vector (:data:`~jalapeno.perf.ops.FEATURES` order, this model's routing)."""
        return self._x(shape)

    def fixed_time_gradient(self, name: str) -> np.ndarray | None:
        """d(step time)/d(``efficiency.<name>``) as coefficients over the features, when that field enters the step
        time only through the row of times that add as they are, affinely: the overhead terms of
        :func:`overhead_vector` (per unit of the field) and ``prefill_collective_overlap`` (minus the overlappable
        collectives' per-token time, on prefill tokens). None for any other field (it changes the roofline)."""
        if name == "prefill_collective_overlap":
            c = sum((o.net_time[IDX["T"]] for o in self._net if o.name in OVERLAPPABLE), 0.0)
            return vec(Tp=-float(c))
        if name == "pdl_kernel_fraction":  # minus each kernel's full cost, in a run launched with PDL
            per = self.chip.launch_us + self.eff.kernel_overhead_us if self.eff.launch_pdl else 0.0
            return vec(one=-self.kernels * per * 1e-6)
        if name not in _OVERHEAD_FIELDS:
            return None
        m = self.model
        unit = Efficiency.model_construct(**{**{f: 0.0 for f in _OVERHEAD_FIELDS}, name: 1.0})
        return overhead_vector(unit, m.num_layers, self._moe_layers(),
                               m.num_experts / self.parallel.ep if m.num_experts else 0.0, self.kernels,
                               fp8_moe_layers=self._fp8_moe_layers(), pdl=pdl_share(self.eff))

    @property
    def time_rows(self) -> np.ndarray:
        """The time coefficients over the features: each work operator's compute-time row, then its memory-time
        row, then the one row of times that add as they are (collectives and overheads: ``overhead_vector``)."""
        return self._M[: 2 * self._n + 1]

    def step(self, shape: StepShape) -> StepCost:
        """Time (s), energy (J), FLOPs and bytes of one step of one replica (an empty step costs nothing)."""
        if not (shape.prefill_tokens or shape.decode_tokens):
            return StepCost(0.0, 0.0)
        if self._small_m:
            return self._step_rows(shape)
        y: list[float] = self._M.dot(self._x(shape)).tolist()
        n = self._n
        t = sum([c if c > m else m for c, m in zip(y[:n], y[n : 2 * n])]) + y[2 * n]
        if self._verify_s or self._masked_s or self._unfused_s:
            t = self._plus_step_extras(t, shape)
        if shape.prefill_tokens and t < self.prefill_host_s:  # an eager prefill the host cannot issue faster
            t = self.prefill_host_s
        nc = self.chips_per_replica
        e = min(y[2 * n + 1] + self.idle_w * t * nc, self.tdp_w * t * nc)
        return StepCost.of(t, e, y[2 * n + 2], y[2 * n + 3])

    def decode_steps(self, shape: StepShape, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Durations and energies of ``k`` consecutive decode steps of the same batch (see
        :func:`advance_decode`); equal to ``k`` calls of :meth:`step`, in one vectorised evaluation."""
        if shape.prefill_tokens:
            raise ConfigError("decode_steps needs a decode-only step shape (prefill_tokens must be 0)")
        if k <= 0:
            return np.zeros(0), np.zeros(0)
        if not shape.decode_tokens:
            return np.zeros(k), np.zeros(k)
        fast = self._decode_steps_affine(shape, k)
        if fast is not None:
            return fast
        return self._decode_steps_matrix(shape, k)

    def decode_step_lists(self, shape: StepShape, k: int, start: float = 0.0,
                          stop: float | None = None) -> tuple[list[float], list[float]]:
        """:meth:`decode_steps` as two Python lists, the same floats: when the run is affine (see
        :meth:`_decode_steps_affine`) each step's time and energy are evaluated in scalars, operation for
        operation as the vectorised form does them (cheaper than numpy's per-call overhead for the few steps
        between two events of a simulation). ``stop``: only the steps up to the first that ends at or after
        ``stop``, step ends being ``start + d1``, ``+ d2``, ... summed one by one (the steps after it are not
        priced: a multi-step batch cut at an arrival)."""
        if shape.prefill_tokens or k <= 0 or not shape.decode_tokens:
            ta, ea = self.decode_steps(shape, k)
            return _cut(ta.tolist(), ea.tolist(), start, stop)
        line = self._affine_line(shape, k)
        if line is None:
            ta, ea = self._decode_steps_matrix(shape, k)
            return _cut(ta.tolist(), ea.tolist(), start, stop)
        a_t, b_t, a_e, b_e = line
        verify = self._verify_s if shape.decode_tokens > shape.decode_seqs else 0.0
        nc, idle, tdp = self.chips_per_replica, self.idle_w, self.tdp_w
        ts: list[float] = []
        es: list[float] = []
        if stop is None and not verify:  # the common case (no arrival to cut at): the same floats, fewer tests
            for j in range(k):  # b·j with an int j is b·float(j): an exact conversion
                t = a_t + b_t * j
                x, cap = a_e + b_e * j + idle * t * nc, tdp * t * nc
                ts.append(t)  # type: ignore[arg-type]
                es.append(cap if cap < x else x)
            return ts, es
        end = start
        for j in range(k):
            i = float(j)
            t = a_t + b_t * i
            if verify:
                t = t + verify
            x, cap = a_e + b_e * i + idle * t * nc, tdp * t * nc
            ts.append(t)  # type: ignore[arg-type]
            es.append(cap if cap < x else x)
            if stop is not None:
                end += t
                if end >= stop:
                    break
        return ts, es

    def _decode_steps_affine(self, shape: StepShape, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`decode_steps` in closed form (the line of :meth:`_affine_line`, vectorised)."""
        line = self._affine_line(shape, k)
        if line is None:
            return None
        a_t, b_t, a_e, b_e = line
        nc = self.chips_per_replica
        i: np.ndarray = np.arange(k, dtype=np.float64)
        t = a_t + b_t * i
        if self._verify_s and shape.decode_tokens > shape.decode_seqs:
            t = t + self._verify_s
        e = np.minimum(a_e + b_e * i + self.idle_w * t * nc, self.tdp_w * t * nc)
        return t, e

    def _affine_line(self, shape: StepShape, k: int) -> tuple[float, float, float, float] | None:
        """:meth:`decode_steps` in closed form. Over ``k`` decode steps every feature is affine in the step index
        ``i`` (contexts grow by one token per sequence per step), so each operator's compute and memory times are
        lines; when no operator changes bound inside the window (and no sliding-window cap starts to bind), the
        step time is one line ``A + B·i`` and the energy ``min(E + F·i + idle·t, tdp·t)``. None when that does
        not hold (the matrix path then evaluates every step), nor with the small-M terms. Returns ``(A, B, E, F)``."""
        if self._small_m:
            return None  # op times are no longer max(line, line): the matrix path prices every step exactly
        if self._unfused_s and shape.tokens > self._unfused_above:
            return None  # the PyTorch path's host term: the matrix path adds it
        d = shape.decode_seqs
        r = shape.decode_tokens / d if d else 0.0
        km = k - 1
        dcw = float(d)
        window = self.model.attention_window
        if window:
            dcw = float(shape.decode_below_window)
            if shape.decode_ctx_sum_window + km * dcw > d * window:
                return None  # the window cap binds inside the run
        y0: list[float] = self._M.dot(self._x(shape)).tolist()
        g: list[float]
        if self.kv_sram_tokens:
            slopes = self._tier_slopes(shape, km, dcw)
            if slopes is None:
                return None
            gv = self._M_ctx.dot(np.array((d, dcw, d * r, dcw * r))) + self._M_ext.dot(np.array(slopes))
            g = gv.tolist()
        else:
            g = self._ctx_slopes(d, dcw, r)
        n = self._n
        a_t, b_t = y0[2 * n], g[2 * n]
        # each operator: compute-bound at the first step (tc >= tm) must stay so at the last, and memory-bound
        # stay memory-bound; None where it changes bound inside the run (the same comparisons, one per branch)
        # (zip stops at the n-long slices: y0 and g from their start are their first n entries, uncopied)
        for tc, tm, dc, dm in zip(y0, y0[n : 2 * n], g, g[n : 2 * n]):
            if tc >= tm:
                if not (tc + dc * km >= tm + dm * km):
                    return None
                a_t += tc
                b_t += dc
            else:
                if tc + dc * km >= tm + dm * km:
                    return None
                a_t += tm
                b_t += dm
        return a_t, b_t, y0[2 * n + 1], g[2 * n + 1]

    def _ctx_slopes(self, d: int, dcw: float, r: float) -> list[float]:
        """Each row's growth per decode step, ``M_ctx · (d, dcw, d·r, dcw·r)``: it depends only on the batch
        (sequences, those below the window, tokens per sequence), which stays the same over many events, so it
        is kept per batch (a few hundred keys at most; cleared past 4,096)."""
        key = (d, dcw, r)
        g = self._slopes.get(key)
        if g is None:
            if len(self._slopes) > 4096:
                self._slopes.clear()
            g = self._slopes[key] = self._M_ctx.dot(np.array((d, dcw, d * r, dcw * r))).tolist()
        return g

    def _tier_slopes(self, shape: StepShape, km: int, dcw: float) -> tuple[float, float] | None:
        """Per-step growth of the SRAM-tier features over ``km`` more decode steps, when they stay affine: the
        whole context stays in SRAM (they grow with C and Cw), or SRAM was full already and C = Cw (they stay
        at S). None otherwise (the matrix path evaluates every step)."""
        c0, d, s_tok = shape.decode_ctx_sum, shape.decode_seqs, self.kv_sram_tokens
        if c0 + km * d <= s_tok:
            return float(d), dcw
        if c0 >= s_tok and shape.decode_ctx_sum_window == c0 and not self.model.attention_window:
            return 0.0, 0.0
        return None

    def _decode_steps_matrix(self, shape: StepShape, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`decode_steps` step by step: one feature row per step, one matrix product."""
        x = self._x(shape)
        X = np.empty((k, x.shape[0]), dtype=x.dtype)
        X[:] = x
        i: np.ndarray = np.arange(k, dtype=float)
        d = shape.decode_seqs
        r = shape.decode_tokens / d if d else 0.0
        w = self.model.attention_window
        c: np.ndarray = shape.decode_ctx_sum + i * d
        if w:
            cw = np.minimum(shape.decode_ctx_sum_window + i * shape.decode_below_window, float(d * w))
        elif shape.decode_ctx_sum_window == shape.decode_ctx_sum:
            cw = c
        else:
            cw = shape.decode_ctx_sum_window + i * d
        if cw is c and r == 1.0:  # one token per sequence, no window: the four context columns are equal
            X[:, _CTX_COLS] = c[:, None]
        else:
            X[:, IDX["C"]], X[:, IDX["Cw"]], X[:, IDX["Cr"]], X[:, IDX["Cwr"]] = c, cw, c * r, cw * r
        if self.kv_sram_tokens:  # the SRAM tier's share of each step's context (see _tier_x)
            cs = np.minimum(c, float(self.kv_sram_tokens))
            X[:, NF] = cs
            X[:, NF + 1] = np.asarray(cw, dtype=np.float64) * np.where(c > 0, cs / np.maximum(c, 1.0), 0.0)
        Y = X @ self._M.T
        n = self._n
        if self._small_m:
            t = self._rows_times(X, Y)
        else:
            t = np.maximum(Y[:, :n], Y[:, n : 2 * n]).sum(axis=1) + Y[:, 2 * n]
        if self._verify_s and shape.decode_tokens > shape.decode_seqs:
            t = t + self._verify_s
        if self._unfused_s and shape.tokens > self._unfused_above:
            t = t + self._unfused_s
        nc = self.chips_per_replica
        e = np.minimum(Y[:, 2 * n + 1] + self.idle_w * t * nc, self.tdp_w * t * nc)
        return t, e

    def breakdown(self, shape: StepShape) -> StepBreakdown:
        """Per-operator costs of one step (FLOPs, bytes by memory level, network bytes, time, bound)."""
        x = self._x(shape)
        rows: list[tuple] = []
        for j, o in enumerate(self._work):
            tc, tm = float(self._tc[j] @ x), float(self._tm[j] @ x)
            t_op = max(tc, tm)
            if self._small_m:
                tc, t_op = self._op_rows_time(j, x, tc, tm)
            fl = float(o.flops @ x[:NF]) * o.mult
            by: dict[str, float] = {}
            for s, c in o.bytes.items():
                name = self.levels[s].name
                by[name] = by.get(name, 0.0) + float(c[:NF] @ x[:NF]) * o.mult
            if self.kv_sram_tokens and "KV" in o.bytes:  # the SRAM tier's share of the decode KV read
                kv = o.bytes["KV"]
                moved = float(kv[IDX["C"]] * x[NF] + kv[IDX["Cw"]] * x[NF + 1]) * o.mult
                main_name, sram_name = self.levels["KV"].name, self.levels["KVS"].name
                by[main_name] = by.get(main_name, 0.0) - moved
                by[sram_name] = by.get(sram_name, 0.0) + moved
            bound = "compute" if tc >= tm else "memory"
            dtype = o.dtype or self.compute_dtypes["attn_math"]
            rows.append((o.name, fl, by, 0.0, t_op, bound, dtype, o.layers))
        for o, v in zip(self._net, self._net_time):
            nb, nt = float(o.net_bytes @ x[:NF]) * o.mult, float(v @ x[:NF])
            rows.append((o.name, 0.0, {}, nb, nt, "network", "", o.layers))
        ovh = float(self._overhead @ x[:NF])
        if self._verify_s or self._masked_s or self._unfused_s:
            ovh = self._plus_step_extras(ovh, shape)
        if ovh:
            rows.append(("overhead", 0.0, {}, 0.0, ovh, "overhead", "", self.model.num_layers))
        rows = [r for r in rows if r[4] > 0 or r[1] > 0]
        total = sum(r[4] for r in rows)
        ops = tuple(
            OpCost(n, f, b, nb, t, bd, t / total if total else 0.0, d, ly) for n, f, b, nb, t, bd, d, ly in rows
        )
        bytes_by: dict[str, float] = {}
        for oc in ops:
            for k, vb in oc.bytes.items():
                bytes_by[k] = bytes_by.get(k, 0.0) + vb
        cost = self.step(shape)
        layer_t = sum(o.time_s for o in ops if o.layers and o.name not in ("pp_handoff", "overhead"))
        max_stage = max(len(r) for r in self._stages)
        stage_t = cost.time_s - layer_t + layer_t * max_stage / self.model.num_layers
        if self.parallel.pp > 1:
            stage_t -= sum(o.time_s for o in ops if o.name == "pp_handoff")
        return StepBreakdown(
            ops=ops, time_s=cost.time_s, energy_j=cost.energy_j, flops=sum(o.flops for o in ops), bytes=bytes_by,
            net_bytes=sum(o.net_bytes for o in ops), tokens=shape.tokens, num_chips=self.chips_per_replica,
            stage_time_s=stage_t,
        )

    def _state_plan(self, max_seqs: int) -> tuple[float, float]:
        """Linear-attention state: (bytes one sequence keeps on one chip of the fullest stage, bytes reserved
        per chip for ``max_seqs`` sequences). With dp-attention a rank keeps whole states for its share."""
        m, p = self.model, self.parallel
        if not m.num_linear_layers:
            return 0.0, 0.0
        per_layer = linear_state_bytes_per_layer(m, self._dims)
        per_seq = per_layer * max(sum(m.is_linear_layer(i) for i in r) for r in self._stages)
        seqs = math.ceil(max_seqs / p.tp) if p.dp_attention else max_seqs
        return per_seq, per_seq * seqs

    def memory_plan(self, max_batch_tokens: int = 8192, max_seqs: int = DEFAULT_STATE_SEQS) -> MemoryPlan:
        """Per-chip placement of weights, activation reserve and KV cache; KV capacity of one replica.
        Models with linear-attention layers also reserve, next to the KV cache, the constant recurrent state
        of ``max_seqs`` sequences (the engine's max_num_seqs: a state slot for every sequence it may run)."""
        m, p = self.model, self.parallel
        tp = p.tp
        a = self.act_bytes
        inter = m.intermediate_size / tp
        if m.num_experts:
            inter = max(inter, m.experts_per_token * m.moe_intermediate_size * p.ep / tp)
        logits = min(max_batch_tokens, 1024) * m.vocab_size / tp * 4
        reserve = max_batch_tokens * a * (4 * m.hidden_size + 3 * inter) + logits
        lv_kv, lv_a = self.levels["KV"], self.levels["A"]
        lv_w = self.levels["WS"] if self.weights_in_sram else self.levels["W"]

        rule = self.memory_rule

        def usable(lv) -> float:
            if lv.kind == "sram":
                return float(lv.capacity_gb) * 1e9 * SRAM_UTILIZATION
            return rule.weight_cap(float(lv.capacity_gb) * 1e9)

        on_level = {self.levels["W"].name: self.main_weight_bytes_per_chip}
        on_level[self.levels["WS"].name] = on_level.get(self.levels["WS"].name, 0.0) + self.sram_weight_bytes_per_chip
        if self.kv_sram_bytes:  # the SRAM KV tier's share is taken before activations
            kvs = self.levels["KVS"].name
            on_level[kvs] = on_level.get(kvs, 0.0) + self.kv_sram_bytes
        # activations live with the KV cache, or spill to it when SRAM is full
        acts = reserve if lv_a is lv_kv or on_level.get(lv_a.name, 0.0) + reserve > usable(lv_a) else 0.0
        if lv_kv.kind == "sram":
            free = usable(lv_kv) - on_level.get(lv_kv.name, 0.0) - acts
        else:  # main memory: the serving stack's rule (vLLM / SGLang / TensorRT-LLM semantics)
            free = rule.kv_bytes(float(lv_kv.capacity_gb) * 1e9, on_level.get(lv_kv.name, 0.0), acts)
        per_layer = kv_bytes_per_token_per_layer(m, self._dims, self.kv_bytes_per_element)
        max_stage = max(sum(not m.is_linear_layer(i) for i in r) for r in self._stages)  # layers with a KV cache
        per_chip_token = per_layer * max_stage
        holders = 1 if p.dp_attention else tp  # chips holding one sequence's KV in one stage
        kv_per_token = per_layer * (m.num_layers - m.num_linear_layers) * holders
        state_seq, state_reserve = self._state_plan(max_seqs)
        free -= state_reserve
        if free <= 0:
            raise CapacityError(
                f"does not fit: the weights ({self.weight_bytes_per_chip / 1e9:.1f} GB per chip) and activations"
                + (f" and the linear-attention state of {max_seqs} sequences ({state_reserve / 1e9:.1f} GB)"
                   if state_reserve else "") +
                f" leave no room for the KV cache in {lv_kv.name} (model {m.name} on "
                f"{p.chips_per_replica}x{self.chip.key}, {p.describe()}); try more chips, a smaller weight dtype "
                f"or a smaller token budget per step (--max-num-batched-tokens, now {max_batch_tokens})"
            )
        tokens = int(free // per_chip_token) * (tp if p.dp_attention else 1) + self.kv_sram_tokens
        notes = []
        if self.kv_sram_tokens:
            notes.append(f"{self.kv_sram_bytes / 1e9:g} GB of KV per chip in {self.levels['KVS'].name} "
                         f"({self.kv_sram_tokens:,} tokens), the rest in {lv_kv.name}")
        if self.kv_offload is not None:
            notes.append(f"KV offload tier {self.kv_offload.name}: {self.kv_offload.capacity_gb:g} GB per chip "
                         f"({self.kv_offload_tokens:,} tokens) at {self.kv_offload.bandwidth_gbps:g} GB/s")
        if (rule.kind, rule.fraction) != ("total", MAIN_MEMORY_UTILIZATION) and lv_kv.kind != "sram":
            notes.append(f"main memory budgeted as {rule.describe()} ({rule.kind} rule)")
        if self.weights_in_sram:
            notes.append(f"weights resident in {lv_w.name}")
        elif self.sram_weight_bytes_per_chip:
            notes.append(f"{self.sram_weight_bytes_per_chip / 1e9:.2f} GB of weights per chip pinned in "
                         f"{self.levels['WS'].name}, the rest in {self.levels['W'].name}")
        return MemoryPlan(
            capacity_bytes_per_chip=usable(lv_w), weight_bytes_per_chip=self.weight_bytes_per_chip,
            weight_location=lv_w.name, kv_location=lv_kv.name, activation_reserve_bytes=reserve,
            kv_bytes_available_per_chip=free, kv_bytes_per_token=kv_per_token, kv_capacity_tokens=tokens,
            weights_in_sram=self.weights_in_sram, sram_weight_bytes_per_chip=self.sram_weight_bytes_per_chip,
            notes=tuple(notes), state_bytes_per_sequence=state_seq * (1 if p.dp_attention else tp),
            state_reserve_bytes_per_chip=state_reserve, state_sequences=max_seqs if state_reserve else 0,
            kv_sram_tokens=self.kv_sram_tokens, kv_offload_tokens=self.kv_offload_tokens,
        )
