"""Serving-framework profiles: what the serving stack in front of the chip adds to every request.

The chip's ``efficiency.request_overhead_ms`` is a *generic* front-end latency (HTTP, tokenization, admission,
detokenization and first-chunk streaming; in TTFT and E2E latency, not in step time). Measured serving stacks
differ in it by a factor of two or more, independently of the accelerator, so ``jalapeno simulate --framework``
replaces it with the named framework's value. Nothing else changes: per-step and per-layer overheads stay the
chip's (they were fitted over all frameworks together).

Every value here is the HOPPER calibration (issue #13, ``python benchmarks/fit_terms.py fit --chip h200
--frameworks``): fitted jointly with the chip's named overhead terms (docs/cost-model.md) by least squares on
ln(predicted / measured) of output throughput, TPOT and TTFT over the H200 InferenceX aggregated rows dated before
2026-03 (no MTP; one point per configuration). H100 rows and later H200 rows are the held-out check
(docs/fidelity.md). A chip whose family was fitted separately carries its own values in
``efficiency.framework_overhead_ms`` (Blackwell: the B200 fit; CDNA: the MI355X fit; Hopper since issue #13 step 7:
the H200 refit with a per-kernel cost of prefilling steps, whose front ends are a few ms), which take precedence;
these global values (the Hopper fit before step 7, which carried DeepSeek-R1's eager prefill launches) serve every
other chip.

Each profile also names its stack's **scheduling policy** (:class:`SchedulingPolicy`), which the ONE engine
scheduler takes as configuration (``EngineConfig``): vLLM V1 and TensorRT-LLM mix prefill chunks into decode
steps under one token budget (the scheduler's default); SGLang runs prefill batches on their own (decode pauses;
mixed chunks are off by default) under ``max_prefill_tokens``. A benchmark's launch flags (e.g. InferenceX's
``--scheduler-recv-interval``) override the profile's defaults per run (:func:`SchedulingPolicy.with_`).

Disaggregated serving stacks (``dynamo-sglang``, ``dynamo-trt``, ``mori-sglang``, ``sglang-disagg``) are
profiles too: their front-end latency is their engine's (``engine``: SGLang or TensorRT-LLM, so a chip family's
fitted value for that engine applies), and they add ``kv_handoff_ms``, the fixed per-request cost of handing a
prefilled request to the decode pool (router decision, KV bootstrap handshake / memory registration, transfer
completion notice), paid on the KV link (:class:`jalapeno.sim.cluster.KVLink` ``handoff_s``) on top of the wire
time. Those values are FITTED on InferenceX disaggregated points (:data:`HANDOFF_FITTED`), not published. A stack
also carries ``prefill_token_ns``: what its prefill server spends per prompt token beyond the cost model's price
(added to the prefill pool's ``efficiency.prefill_token_overhead_ns``, where it replaces the chip's front-end
``request_overhead_us_per_token``; the decode pool is untouched), FITTED from the request rate its saturated
prefill pools sustained (:data:`PREFILL_FITTED`, docs/fidelity.md); a prefill worker launched with expert parallelism and
without dp-attention takes ``prefill_ep_token_ns`` instead where the stack has one (:data:`PREFILL_EP_FITTED`). A stack
built on SGLang's decode server also names ``first_token_steps``, the decode-loop iterations a request waits for its
first token beyond the decode step in progress (COUNTED from the source, :data:`FIRST_TOKEN_STEPS_SOURCE`). A
disaggregated stack's prefill pool
schedules under its engine's policy (SGLang: prefill batches of up to ``max_prefill_tokens``;
:func:`jalapeno.sim.scenario.prefill_limits`).
"""

from __future__ import annotations

from dataclasses import dataclass

from jalapeno.errors import ConfigError
from jalapeno.perf.types import MemoryRule

_FIT = (
    "CALIBRATED (Hopper): fitted with the chip overhead terms on the H200 InferenceX aggregated rows dated before "
    "2026-03 (docs/fidelity.md, python benchmarks/fit_terms.py fit --chip h200 --frameworks)"
)


#: provenance of the disaggregated stacks' ``kv_handoff_ms`` (status: fitted)
HANDOFF_FITTED = (
    "FITTED (status fitted, not published): kv_handoff_ms by soft-L1 least squares on ln(pred/meas) of median TTFT "
    "over the fit half of a random configuration split (seed 0, per stack) of the InferenceX B200/MI355X "
    "disaggregated points at concurrency <= 64 (benchmarks/data/calibration-blackwell-amd.csv; 2026-12-01, python "
    "benchmarks/disagg_fidelity.py --fit; docs/fidelity.md), with each stack's prefill_token_ns (PREFILL_FITTED) in place. dynamo-trt's 756 ms (764 before the refit) is driven by 3 of its 4 fit "
    "points (idle-system TTFTs of 1.25-1.75 s where reruns of the same layout measure 0.17 s): low confidence. "
    "mori-sglang's 78.5 ms (2026-12-02, third session) is instead the median over its fit-half points at concurrency "
    "<= 4 of measured TTFT - (front end + prefill + wire) once its prefill_token_ns no longer double-counts the chip's "
    "front-end per-token latency (2 points, 53.0 and 104.1 ms: low confidence; docs/fidelity.md 'Third session')"
)


#: provenance of the disaggregated stacks' ``prefill_token_ns`` (status: fitted)
PREFILL_FITTED = (
    "FITTED (status fitted, not published): prefill_token_ns = median over the prefill-saturated points of the fit half "
    "(random:0.5 configuration split, seed 0, per stack) of 1 / (measured prompt tokens/s per prefill worker, Little's "
    "law) - the cost model's seconds per prompt token of a full prefill step (the pool's batch: SGLang's "
    "max_prefill_tokens 16384 since the third session, 2026-12-02); InferenceX B200/MI355X disaggregated "
    "points, benchmarks/data/calibration-blackwell-amd.csv (2026-12-01, python benchmarks/disagg_fidelity.py "
    "--fit-prefill; calibration.disagg.fit_prefill_token_ns; docs/fidelity.md), per stack and prefill weight "
    "precision: a precision with 1-2 saturated points takes its stack's median over all precisions, one with none "
    "gets none (0: B200 dynamo-sglang FP4, whose 4-GPU prefill workers never saturate). dynamo-trt: 1 saturated "
    "fit point, fewer than the 3 a parameter needs, so none (0). Fitted on B200/MI355X only: on H100/H200 the B200 "
    "value overprices SGLang's TTFT (docs/fidelity.md, cross-chip check). dpa_decode_moe_layer_us = median over "
    "the fit half's "
    "non-MTP points with a dp-attention + EP decode pool of (measured TPOT - the cost model's decode step at the "
    "Little's-law batch) / MoE layers (calibration.disagg.fit_dpa_decode_moe_layer_us); the two B200 stacks have "
    "1 and 2 such points, so they share their chip's median (3 points, 190 us: DeepEP's published low-latency "
    "dispatch + combine at EP8 on H800 is 77 + 114 us, github.com/deepseek-ai/DeepEP README)"
)


#: why the NVIDIA stacks' ``dpa_decode_moe_layer_us`` (fitted on B200 rows) also prices H100 / H200 decode pools
DPA_DECODE_VENDOR_SOURCE = (
    "TRANSFERRED within the vendor (status transferred, value fitted on B200 only, PREFILL_FITTED): the term is the "
    "fixed cost of a dp-attention + EP decode step's expert all-to-all beyond the cost model, i.e. the EP "
    "communication library's low-latency dispatch + combine (SGLang: DeepEP low_latency mode; TensorRT-LLM: its "
    "wide-EP all-to-all), whose latency is set by NVSHMEM / RDMA round trips, not by the die: DeepEP publishes "
    "77 + 114 us at EP8 on H800 + CX7 (github.com/deepseek-ai/DeepEP README), the B200 fit's 190 us. Checked on "
    "the 53 H100/H200 disaggregated InferenceX points (calibration.csv; in no fit): docs/fidelity.md, "
    "Disaggregated, eighth session. The prefill term stays B200-only (it overprices H200's TTFT)"
)


#: provenance of the MI355X stacks' ``prefill_ep_token_ns`` (status: fitted)
PREFILL_EP_FITTED = (
    "FITTED (status fitted, not published): prefill_ep_token_ns = median over the fit half (random:0.5 configuration "
    "split, seed 0, per stack) of the prefill-saturated points whose prefill worker was launched with EP and without "
    "dp-attention (layout 'EPn DPattn=False', n > 1) of 1 / (measured prompt tokens/s per prefill worker, Little's "
    "law) - the cost model's seconds per prompt token of a full prefill step (calibration.disagg.fit_prefill_token_ns, "
    "key '<stack>@<weights>/ep-only'; python benchmarks/disagg_fidelity.py --fit-prefill; docs/fidelity.md, "
    "Disaggregated, sixth session). mori-sglang has 1 such FP8 point and sglang-disagg 2, so they share the MI355X "
    "median of the 3 (34397, 37768, 60098 ns -> 37768; the held-out half's 2 read 35098 and 36290). Mechanism (source): "
    "the launcher both MI355X stacks run (billishyahao/sglang_disagg sglang_disagg_server.sh, cloned by "
    "SemiAnalysisAI/InferenceX benchmarks/dsr1_fp8_mi355x_sglang-disagg_slurm.sh) gives a prefill worker without DP "
    "only '--tp-size N --ep-size N' (MODEL_DP_CONFIGS' '--moe-a2a-backend mori --enable-dp-attention' and "
    "'--enable-two-batch-overlap' are set only with DP): its expert-parallel MoE runs without the all-to-all backend "
    "and without overlapping its communication (why that costs FP8 and not MXFP4 is not established). FP8 only: the MXFP4 "
    "points of such workers price at the stack's fp4 value (20522, 20536 ns)"
)


#: provenance of the SGLang-based disaggregated stacks' ``first_token_steps`` (status: from the source, counted)
FIRST_TOKEN_STEPS_SOURCE = (
    "COUNTED from the source (status inferred, not fitted): sgl-project/sglang python/sglang/srt/disaggregation/"
    "decode.py. A decode worker's event loop (event_loop_normal/overlap_disagg_decode) receives requests, runs "
    "process_decode_queue (DecodePreallocQueue.pop_preallocated, DecodeTransferQueue.pop_transferred) and then one "
    "batch per iteration; while it decodes, an iteration is one decode step. A request reaches the decode worker "
    "when the router sends it (with its prefill); the iteration that receives it creates its KV receiver and starts "
    "the bootstrap handshake (_update_handshake_waiters: KVPoll.Bootstrapping), the next one sees WaitingForInput, "
    "pre-allocates its KV and sends the indices to the prefill worker, which only then moves it from its "
    "PrefillBootstrapQueue to prefill (disaggregation/prefill.py pop_bootstrapped): 2 iterations before the prefill "
    "while the decode pool is busy. After the KV lands, the iteration that polls it (pop_transferred; the step in "
    "progress, modelled separately) builds the prebuilt batch, and the overlap loop (event_loop_overlap_disagg_"
    "decode, SGLang's default) processes that batch's result, streaming the first token, one iteration later: 1 "
    "more. The 2 pre-prefill iterations are priced after the KV lands (the same TTFT while the prefill pool does not "
    "queue: the decode step then is the one at the request's arrival). An idle decode worker loops at once: 0"
)


#: each stack's default memory rule (:class:`~jalapeno.perf.types.MemoryRule`; a run's launch flags override it,
#: :func:`jalapeno.calibration.launch.launch_memory`)
VLLM_MEMORY = MemoryRule(
    "total", 0.9,
    "vLLM EngineArgs gpu_memory_utilization default 0.9: the fraction of the GPU's total memory for weights, "
    "activations (profiled peak) and KV cache (docs.vllm.ai, engine arguments)")
SGLANG_MEMORY = MemoryRule(
    "static", 0.88,
    "SGLang mem_fraction_static: the fraction of total GPU memory for the weights and the KV pool, activations and "
    "CUDA graphs in the rest (python/sglang/srt/server_args.py; model_runner: KV pool = free memory after the "
    "weights - total x (1 - mem_fraction_static)). Unset, SGLang derives it from the GPU's memory minus a "
    "version-dependent reserve (>= 10 GiB on GPUs over 60 GiB; 0.88 when the memory is unknown): 0.88 here. "
    "Published runs pass their own (InferenceX: 0.8-0.95)")
TRTLLM_MEMORY = MemoryRule(
    "free", 0.9,
    "TensorRT-LLM kv_cache_config.free_gpu_memory_fraction default 0.9: the KV cache takes that fraction of the "
    "memory free after the weights are loaded and a forward pass at max_num_tokens has run "
    "(nvidia.github.io/TensorRT-LLM/examples/kvcacheconfig.html; llm-api KvCacheConfig)")


@dataclass(frozen=True)
class SchedulingPolicy:
    """How a serving stack schedules prefill against decode (defaults: vLLM V1, the engine scheduler's own).

    ``separate_prefill``: a step that prefills carries no decodes (SGLang ``enable_mixed_chunk=False``);
    ``max_prefill_tokens``: prompt tokens per prefill-only step (SGLang ``--max-prefill-tokens``, with
    ``--chunked-prefill-size`` the per-request chunk; None = the engine's token budget); ``recv_interval``:
    requests are received every that many decode steps, or right after a prefill step (SGLang
    ``--scheduler-recv-interval``; 1 = every step); ``balance_ranks`` / ``balance_timeout_iters``: attention-DP
    context balancing (TensorRT-LLM ``attention_dp_config: enable_balance, timeout_iters``; ranks = the
    attention-DP size, 1 = off): while every rank decodes, new requests wait for one per rank or the timeout."""

    separate_prefill: bool = False
    max_prefill_tokens: int | None = None
    recv_interval: int = 1
    balance_ranks: int = 1
    balance_timeout_iters: int = 0
    source: str = ""

    def with_(self, **changes) -> "SchedulingPolicy":
        """This policy with some fields replaced (a run's launch flags over the stack's defaults)."""
        from dataclasses import replace

        return replace(self, **changes)


#: SGLang's documented scheduler defaults (python/sglang/srt/server_args.py, docs "Server Arguments"):
#: ``enable_mixed_chunk`` False (a prefill batch runs alone; the running decodes wait), ``max_prefill_tokens``
#: 16384, ``scheduler_recv_interval`` 1; the event loop (``Scheduler.get_next_batch_to_run``) runs a new prefill
#: batch whenever one can be formed, else one decode step of the running batch
SGLANG_POLICY = SchedulingPolicy(
    separate_prefill=True, max_prefill_tokens=16384, recv_interval=1,
    source="SGLang server_args defaults: enable_mixed_chunk=False, max_prefill_tokens=16384, "
           "scheduler_recv_interval=1 (sgl-project/sglang python/sglang/srt/server_args.py; managers/scheduler.py "
           "get_next_batch_to_run: a new prefill batch first, else decode)",
)
#: vLLM V1 (and TensorRT-LLM in-flight batching): decodes first, prefill chunks fill the step's token budget
MIXED_POLICY = SchedulingPolicy(source="vLLM V1 scheduler: chunked prefill mixed into decode steps under "
                                       "max_num_batched_tokens; TensorRT-LLM in-flight batching under max_num_tokens")


@dataclass(frozen=True)
class DecodeSlots:
    """A disaggregated recipe's decode ``--max-running-requests`` per worker, by the decode pool's layout (the
    recipe sets it from its flags, not per run): with dp-attention ``per_dp_rank`` × the worker's attention ranks
    (its chips), else ``ep`` with expert parallelism (EP > 1), else ``tp``. A prefilled request waits for one of
    these slots before its KV is sent (:mod:`jalapeno.sim.cluster` decode admission)."""

    per_dp_rank: int
    ep: int
    tp: int
    source: str = ""

    def cap(self, chips_per_worker: int, ep: int, dp_attention: bool) -> int:
        """The sequence slots of one decode worker of ``chips_per_worker`` chips."""
        if dp_attention:
            return self.per_dp_rank * chips_per_worker
        return self.ep if ep > 1 else self.tp


#: billishyahao/sglang_disagg sglang_disagg_server.sh launches the PD router as ``python -m
#: sglang_router.launch_router --pd-disaggregation --policy random --prefill-policy random --decode-policy random``:
#: each request's prefill and decode worker are drawn at random, whatever their load. The recipe's value, for
#: ``--routing``; not the stacks' default ``router`` (see :class:`ServingFramework`)
MI355X_SGLANG_DISAGG_ROUTER = "random"
MI355X_SGLANG_DISAGG_ROUTER_SOURCE = (
    "billishyahao/sglang_disagg sglang_disagg_server.sh (ROUTER_CMD: sglang_router.launch_router "
    "--pd-disaggregation --policy random --prefill-policy random --decode-policy random); cloned by "
    "SemiAnalysisAI/InferenceX benchmarks/dsr1_fp8_mi355x_sglang-disagg_slurm.sh")

#: billishyahao/sglang_disagg (the launcher InferenceX's MI355X disaggregated scripts clone;
#: benchmarks/dsr1_fp8_mi355x_sglang-disagg_slurm.sh) sglang_disagg_server.sh: decode ``--max-running-requests``
#: = MORI_MAX_DISPATCH_TOKENS_DECODE (160, set_env_vars.sh) × DECODE_TP_SIZE with dp-attention, 256 with EP, else 128
MI355X_SGLANG_DISAGG_SLOTS = DecodeSlots(
    per_dp_rank=160, ep=256, tp=128,
    source="billishyahao/sglang_disagg sglang_disagg_server.sh (decode_max_running_requests: "
           "MORI_MAX_DISPATCH_TOKENS_DECODE x DECODE_TP_SIZE with DP, 256 with EP, else 128) and set_env_vars.sh "
           "(MORI_MAX_DISPATCH_TOKENS_DECODE=160); cloned by SemiAnalysisAI/InferenceX "
           "benchmarks/dsr1_fp8_mi355x_sglang-disagg_slurm.sh")


@dataclass(frozen=True)
class ServingFramework:
    """One serving stack. ``request_overhead_ms`` replaces the chip's ``efficiency.request_overhead_ms``."""

    key: str
    name: str
    request_overhead_ms: float
    aliases: tuple[str, ...] = ()
    source: str = ""
    #: a disaggregated stack: the profile key of the engine under it (its front-end latency is that engine's)
    engine: str | None = None
    #: a disaggregated stack: fixed per-request prefill -> decode handoff latency, milliseconds
    kv_handoff_ms: float = 0.0
    #: how the stack schedules prefill against decode (a disaggregated stack: its engine's)
    scheduling: SchedulingPolicy = MIXED_POLICY
    #: a disaggregated stack: its prefill server's time per prompt token beyond the cost model, nanoseconds,
    #: per weight precision of the prefill pool (``(weights, ns)`` pairs; a precision not listed: 0), added to
    #: the prefill pool's ``prefill_token_overhead_ns``
    prefill_token_ns: tuple[tuple[str, float], ...] = ()
    #: a disaggregated stack: its prefill server's time per prompt token beyond the cost model (ns) for a prefill
    #: worker launched with expert parallelism and WITHOUT dp-attention (the recipe's EP-only prefill: no MoE
    #: all-to-all backend, no two-batch overlap), per weight precision (``(weights, ns)``; a precision not listed
    #: keeps ``prefill_token_ns``). It REPLACES ``prefill_token_ns`` for such a pool (:data:`PREFILL_EP_FITTED`)
    prefill_ep_token_ns: tuple[tuple[str, float], ...] = ()
    #: a disaggregated stack: per MoE layer of a decode step of a dp-attention decode pool with expert
    #: parallelism, the expert all-to-all's fixed cost beyond the cost model (low-latency dispatch + combine
    #: kernels), microseconds (added to that pool's ``moe_layer_overhead_us``)
    dpa_decode_moe_layer_us: float = 0.0
    #: the calibration roots (``ChipSpec.calibration``: a calibrated chip, or the one a transferred chip took its
    #: values from) on whose rows ``prefill_token_ns`` and ``dpa_decode_moe_layer_us`` were fitted; other chips
    #: get 0 for both (not carried across vendors or generations: B200's SGLang prefill term overprices H200's
    #: TTFT, docs/fidelity.md). Empty: every chip.
    fitted_chips: tuple[str, ...] = ()
    #: chip vendors (``ChipSpec.vendor``) to which ``dpa_decode_moe_layer_us`` ALSO applies beyond ``fitted_chips``:
    #: the decode all-to-all's fixed cost is the vendor's EP communication library's (NVIDIA: DeepEP's low-latency
    #: dispatch + combine, NVSHMEM/RDMA kernels, the same on Hopper and Blackwell), not the die's, so it carries to
    #: the vendor's other chips where ``prefill_token_ns`` does not (:data:`DPA_DECODE_VENDOR_SOURCE`). Empty: only
    #: ``fitted_chips``
    dpa_decode_vendors: tuple[str, ...] = ()
    #: a disaggregated stack: its recipe's decode slots per worker (:class:`DecodeSlots`; None = not published,
    #: the engine default applies)
    decode_slots: DecodeSlots | None = None
    #: a disaggregated stack: how the simulator routes its requests to the prefill and decode workers by default
    #: (:data:`jalapeno.sim.cluster.ROUTING`). Every stack: "least-loaded". The MI355X recipes' router is random
    #: (:data:`MI355X_SGLANG_DISAGG_ROUTER`, ``--routing random``), not the default: on the held-out points it
    #: moves TTFT 42 -> 41% but TPOT 15 -> 18% (docs/fidelity.md, Disaggregated, fifth session)
    router: str = "least-loaded"
    #: a disaggregated stack: decode-loop iterations between the KV's arrival poll and the first token beyond the
    #: decode step in progress, each one decode step of the receiving worker at that moment (the bootstrap
    #: handshake and pre-allocation before the prefill, the first token's result processing after it;
    #: :data:`FIRST_TOKEN_STEPS_SOURCE`); :class:`jalapeno.sim.cluster.Cluster` ``first_token_steps``
    first_token_steps: float = 0.0
    #: how the stack budgets the chip's main memory (None: a disaggregated stack takes its engine's, else the
    #: simulator's default, vLLM's 0.9 of the total)
    memory: MemoryRule | None = None

    def dpa_decode_on(self, chip) -> bool:
        """Whether ``dpa_decode_moe_layer_us`` applies to ``chip``: where the stack's terms were fitted, or a chip
        of one of ``dpa_decode_vendors``."""
        return self.fitted_on(chip) or (getattr(chip, "vendor", None) in self.dpa_decode_vendors)

    def fitted_on(self, chip) -> bool:
        """Whether the stack's per-pool fitted terms apply to ``chip`` (a ChipSpec)."""
        if not self.fitted_chips:
            return True
        cal = getattr(chip, "calibration", None)
        root = (cal.transferred_from if cal is not None else None) or chip.key
        return root in self.fitted_chips


#: the SGLang decode loop's iterations before a request's first token beyond the step in progress
#: (:data:`FIRST_TOKEN_STEPS_SOURCE`: 2 before the prefill + 1 after)
SGLANG_FIRST_TOKEN_STEPS = 3.0

FRAMEWORKS: tuple[ServingFramework, ...] = (
    ServingFramework("vllm", "vLLM (V1 engine, OpenAI server)", 15.7, (), _FIT, memory=VLLM_MEMORY),
    ServingFramework("sglang", "SGLang", 41.1, (), _FIT, scheduling=SGLANG_POLICY, memory=SGLANG_MEMORY),
    ServingFramework("trt-llm", "TensorRT-LLM (trtllm-serve)", 52.0, ("trt", "trtllm", "tensorrt-llm"), _FIT,
                     memory=TRTLLM_MEMORY),
    ServingFramework("dynamo-sglang", "NVIDIA Dynamo over SGLang (disaggregated)", 41.1, (), HANDOFF_FITTED,
                     engine="sglang", kv_handoff_ms=15.5, prefill_token_ns=(("native", 30519.1),),
                     dpa_decode_moe_layer_us=190.0, fitted_chips=("b200",), dpa_decode_vendors=("NVIDIA",),
                     first_token_steps=SGLANG_FIRST_TOKEN_STEPS),
    ServingFramework("dynamo-trt", "NVIDIA Dynamo over TensorRT-LLM (disaggregated)", 52.0, (), HANDOFF_FITTED,
                     engine="trt-llm", kv_handoff_ms=755.7, dpa_decode_moe_layer_us=190.0,
                     fitted_chips=("b200",), dpa_decode_vendors=("NVIDIA",)),
    ServingFramework("mori-sglang", "SGLang PD with the MoRI KV transfer (disaggregated, ROCm)", 41.1, (),
                     HANDOFF_FITTED, engine="sglang", kv_handoff_ms=78.5,
                     prefill_token_ns=(("native", 20649.5), ("fp4", 20536.1)),
                     prefill_ep_token_ns=(("native", 37767.8),),
                     dpa_decode_moe_layer_us=51.3, fitted_chips=("mi355x",), decode_slots=MI355X_SGLANG_DISAGG_SLOTS,
                     first_token_steps=SGLANG_FIRST_TOKEN_STEPS),
    ServingFramework("sglang-disagg", "SGLang PD disaggregation (router + prefill/decode servers)", 41.1, (),
                     HANDOFF_FITTED, engine="sglang", kv_handoff_ms=15.5, prefill_token_ns=(("native", 21181.8),),
                     prefill_ep_token_ns=(("native", 37767.8),), dpa_decode_moe_layer_us=369.3, fitted_chips=("mi355x",),
                     decode_slots=MI355X_SGLANG_DISAGG_SLOTS, first_token_steps=SGLANG_FIRST_TOKEN_STEPS),
)


def get_framework(name: str) -> ServingFramework:
    """The profile named ``name`` (key or alias, case-insensitive). Unknown names raise :class:`ConfigError`."""
    want = name.strip().lower()
    for fw in FRAMEWORKS:
        if want == fw.key or want in fw.aliases:
            return fw
    known = ", ".join(fw.key for fw in FRAMEWORKS)
    raise ConfigError(f"unknown serving framework {name!r}: use one of {known}, or none for the chip's generic front-end latency")


def memory_rule(framework: str | ServingFramework | None, fraction: float | None = None) -> MemoryRule | None:
    """The memory rule of ``framework`` (a disaggregated stack: its engine's), with ``fraction`` in place of the
    stack's default when given (a run's ``--gpu-memory-utilization`` / ``--mem-fraction-static`` /
    ``free_gpu_memory_fraction``). None without a framework, or for a stack with no rule of its own (then the
    simulator's default applies); a fraction outside (0, 1] raises :class:`ConfigError`."""
    if framework is None:
        return None if fraction is None else MemoryRule("total", fraction, "--memory-fraction (no framework: "
                                                                           "vLLM's gpu_memory_utilization semantics)")
    fw = get_framework(framework) if isinstance(framework, str) else framework
    rule = fw.memory
    if rule is None and fw.engine:
        rule = get_framework(fw.engine).memory
    if rule is None:
        rule = VLLM_MEMORY
    if fraction is not None:
        rule = MemoryRule(rule.kind, fraction, f"{rule.describe().split()[0]} {fraction:g} (the run's flag)")
    return rule


def apply_framework(efficiency, framework: str | ServingFramework | None):
    """``efficiency`` (a :class:`~jalapeno.hardware.schema.Efficiency`) with the framework's request overhead
    (the chip's own fitted value for that framework, ``efficiency.framework_overhead_ms``, when it has one);
    unchanged when ``framework`` is None or empty."""
    if not framework:
        return efficiency
    fw = framework if isinstance(framework, ServingFramework) else get_framework(framework)
    disagg = bool(fw.engine)
    if disagg:  # a disaggregated stack: its engine's front end
        fw = get_framework(fw.engine)
    ms = efficiency.framework_overhead_ms.get(fw.key, fw.request_overhead_ms)
    eff = efficiency.model_copy(update={"request_overhead_ms": ms})
    # a disaggregated stack's pools carry their own fitted per-precision terms (``prefill_token_ns``,
    # ``dpa_decode_moe_layer_us``): the engine's per-stack kernel terms are not added there, not to count twice
    return eff if disagg else stack_kernel_terms(eff, fw.key)


def stack_kernel_terms(efficiency, framework_key: str | None):
    """``efficiency`` with the chip's per-stack kernel terms of ``framework_key`` resolved: its
    ``framework_fp8_moe_layer_us`` entry becomes ``fp8_moe_layer_overhead_us`` and its
    ``framework_prefill_host_kernel_us`` entry ``prefill_host_kernel_us`` (each unchanged when the chip has none for
    that stack, or ``framework_key`` is None)."""
    if not framework_key:
        return efficiency
    upd = {}
    us = efficiency.framework_fp8_moe_layer_us.get(framework_key)
    if us is not None:
        upd["fp8_moe_layer_overhead_us"] = float(us)
    host = efficiency.framework_prefill_host_kernel_us.get(framework_key)
    if host is not None:
        upd["prefill_host_kernel_us"] = float(host)
    return efficiency.model_copy(update=upd) if upd else efficiency


def scheduling_policy(framework: str | ServingFramework | None) -> SchedulingPolicy:
    """The scheduling policy of ``framework`` (a disaggregated stack: its engine's); the engine scheduler's
    default (vLLM V1, mixed) when None or empty."""
    if not framework:
        return MIXED_POLICY
    fw = framework if isinstance(framework, ServingFramework) else get_framework(framework)
    if fw.engine:
        fw = get_framework(fw.engine)
    return fw.scheduling


def prefill_token_ns(framework: str | None, weights: str = "native", *, ep_only: bool = False) -> float:
    """A disaggregated stack's prefill-server cost per prompt token beyond the cost model (ns) for a prefill pool
    of ``weights`` precision; 0 for an engine profile, None, or a precision the stack has no value for.
    ``ep_only``: the prefill worker was launched with expert parallelism and without dp-attention; the stack's
    ``prefill_ep_token_ns`` for that precision then replaces the value (when it has one)."""
    if not framework:
        return 0.0
    fw = get_framework(framework)
    ep = dict(fw.prefill_ep_token_ns) if ep_only else {}
    return float(ep[weights]) if weights in ep else dict(fw.prefill_token_ns).get(weights, 0.0)


def dpa_decode_moe_layer_us(framework: str | None) -> float:
    """A disaggregated stack's extra per-MoE-layer cost of a dp-attention + EP decode step (us); 0 for an
    engine profile or None."""
    return get_framework(framework).dpa_decode_moe_layer_us if framework else 0.0


def decode_max_running_requests(framework: str | None, chips_per_worker: int, ep: int,
                                dp_attention: bool) -> int | None:
    """The sequence slots one decode worker of a disaggregated stack's recipe holds (:class:`DecodeSlots`) for a
    decode pool of that layout; None for an engine profile, None, or a stack whose recipe does not publish them."""
    if not framework:
        return None
    slots = get_framework(framework).decode_slots
    return slots.cap(chips_per_worker, ep, dp_attention) if slots is not None else None


def router_policy(framework: str | None) -> str:
    """How a disaggregated stack's router picks workers (:data:`jalapeno.sim.cluster.ROUTING`); "least-loaded"
    for an engine profile, None, or a stack whose recipe's router is not known."""
    return get_framework(framework).router if framework else "least-loaded"


def first_token_steps(framework: str | None) -> float:
    """Decode-loop iterations a disaggregated stack's request waits for its first token beyond the decode step in
    progress (:attr:`ServingFramework.first_token_steps`); 0 for an engine profile or None."""
    return get_framework(framework).first_token_steps if framework else 0.0


def kv_handoff_ms(framework: str | None) -> float:
    """The per-request prefill -> decode handoff latency (ms) of a disaggregated stack; 0 for an engine
    profile or None."""
    return get_framework(framework).kv_handoff_ms if framework else 0.0

__all__ = ["memory_rule", "VLLM_MEMORY", "SGLANG_MEMORY", "TRTLLM_MEMORY", "DecodeSlots", "MI355X_SGLANG_DISAGG_SLOTS", "MI355X_SGLANG_DISAGG_ROUTER", "router_policy", "decode_max_running_requests", "SchedulingPolicy", "SGLANG_POLICY", "MIXED_POLICY", "scheduling_policy", "ServingFramework", "FRAMEWORKS",
           "HANDOFF_FITTED", "PREFILL_FITTED", "DPA_DECODE_VENDOR_SOURCE", "PREFILL_EP_FITTED", "get_framework", "apply_framework", "stack_kernel_terms", "dpa_decode_moe_layer_us",
           "kv_handoff_ms", "prefill_token_ns", "first_token_steps", "FIRST_TOKEN_STEPS_SOURCE",
           "SGLANG_FIRST_TOKEN_STEPS"]
