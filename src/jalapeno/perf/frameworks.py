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
``efficiency.framework_overhead_ms`` (Blackwell: the B200 fit; CDNA: the MI355X fit), which take precedence;
these global values serve every other chip.

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
time. Those values are FITTED on InferenceX disaggregated points (:data:`HANDOFF_FITTED`), not published.
"""

from __future__ import annotations

from dataclasses import dataclass

from jalapeno.errors import ConfigError

_FIT = (
    "CALIBRATED (Hopper): fitted with the chip overhead terms on the H200 InferenceX aggregated rows dated before "
    "2026-03 (docs/fidelity.md, python benchmarks/fit_terms.py fit --chip h200 --frameworks)"
)


#: provenance of the disaggregated stacks' ``kv_handoff_ms`` (status: fitted)
HANDOFF_FITTED = (
    "FITTED (status fitted, not published): kv_handoff_ms by soft-L1 least squares on ln(pred/meas) of median TTFT "
    "over the fit half of a random configuration split (seed 0, per stack) of the InferenceX B200/MI355X "
    "disaggregated points at concurrency <= 64 (benchmarks/data/calibration-blackwell-amd.csv; 2026-12-01, python "
    "benchmarks/disagg_fidelity.py --fit; docs/fidelity.md). dynamo-trt's 764 ms is driven by 3 of its 4 fit "
    "points (idle-system TTFTs of 1.25-1.75 s where reruns of the same layout measure 0.17 s): low confidence"
)


@dataclass(frozen=True)
class SchedulingPolicy:
    """How a serving stack schedules prefill against decode (defaults: vLLM V1, the engine scheduler's own).

    ``separate_prefill``: a step that prefills carries no decodes (SGLang ``enable_mixed_chunk=False``);
    ``max_prefill_tokens``: prompt tokens per prefill-only step (SGLang ``--max-prefill-tokens``, with
    ``--chunked-prefill-size`` the per-request chunk; None = the engine's token budget); ``recv_interval``:
    requests are received every that many decode steps, or right after a prefill step (SGLang
    ``--scheduler-recv-interval``; 1 = every step)."""

    separate_prefill: bool = False
    max_prefill_tokens: int | None = None
    recv_interval: int = 1
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


FRAMEWORKS: tuple[ServingFramework, ...] = (
    ServingFramework("vllm", "vLLM (V1 engine, OpenAI server)", 15.7, (), _FIT),
    ServingFramework("sglang", "SGLang", 41.1, (), _FIT, scheduling=SGLANG_POLICY),
    ServingFramework("trt-llm", "TensorRT-LLM (trtllm-serve)", 52.0, ("trt", "trtllm", "tensorrt-llm"), _FIT),
    ServingFramework("dynamo-sglang", "NVIDIA Dynamo over SGLang (disaggregated)", 41.1, (), HANDOFF_FITTED,
                     engine="sglang", kv_handoff_ms=60.9),
    ServingFramework("dynamo-trt", "NVIDIA Dynamo over TensorRT-LLM (disaggregated)", 52.0, (), HANDOFF_FITTED,
                     engine="trt-llm", kv_handoff_ms=764.2),
    ServingFramework("mori-sglang", "SGLang PD with the MoRI KV transfer (disaggregated, ROCm)", 41.1, (),
                     HANDOFF_FITTED, engine="sglang", kv_handoff_ms=83.8),
    ServingFramework("sglang-disagg", "SGLang PD disaggregation (router + prefill/decode servers)", 41.1, (),
                     HANDOFF_FITTED, engine="sglang", kv_handoff_ms=25.1),
)


def get_framework(name: str) -> ServingFramework:
    """The profile named ``name`` (key or alias, case-insensitive). Unknown names raise :class:`ConfigError`."""
    want = name.strip().lower()
    for fw in FRAMEWORKS:
        if want == fw.key or want in fw.aliases:
            return fw
    known = ", ".join(fw.key for fw in FRAMEWORKS)
    raise ConfigError(f"unknown serving framework {name!r}: use one of {known}, or none for the chip's generic front-end latency")


def apply_framework(efficiency, framework: str | ServingFramework | None):
    """``efficiency`` (a :class:`~jalapeno.hardware.schema.Efficiency`) with the framework's request overhead
    (the chip's own fitted value for that framework, ``efficiency.framework_overhead_ms``, when it has one);
    unchanged when ``framework`` is None or empty."""
    if not framework:
        return efficiency
    fw = framework if isinstance(framework, ServingFramework) else get_framework(framework)
    if fw.engine:  # a disaggregated stack: its engine's front end
        fw = get_framework(fw.engine)
    ms = efficiency.framework_overhead_ms.get(fw.key, fw.request_overhead_ms)
    return efficiency.model_copy(update={"request_overhead_ms": ms})


def scheduling_policy(framework: str | ServingFramework | None) -> SchedulingPolicy:
    """The scheduling policy of ``framework`` (a disaggregated stack: its engine's); the engine scheduler's
    default (vLLM V1, mixed) when None or empty."""
    if not framework:
        return MIXED_POLICY
    fw = framework if isinstance(framework, ServingFramework) else get_framework(framework)
    if fw.engine:
        fw = get_framework(fw.engine)
    return fw.scheduling


def kv_handoff_ms(framework: str | None) -> float:
    """The per-request prefill -> decode handoff latency (ms) of a disaggregated stack; 0 for an engine
    profile or None."""
    return get_framework(framework).kv_handoff_ms if framework else 0.0


__all__ = ["SchedulingPolicy", "SGLANG_POLICY", "MIXED_POLICY", "scheduling_policy", "ServingFramework", "FRAMEWORKS", "HANDOFF_FITTED", "get_framework", "apply_framework", "kv_handoff_ms"]
