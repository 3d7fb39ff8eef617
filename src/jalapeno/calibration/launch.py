"""The serving stacks' launch flags InferenceX ran with: per-run overrides of a framework's scheduling policy.

A published point measures a stack *as launched*; where the benchmark scripts set scheduler flags away from the
stack's defaults, those flags are part of the configuration the simulator must run. Source: the InferenceX
benchmark scripts (github.com/SemiAnalysisAI/InferenceX, ``benchmarks/dsr1_*_{b200,h200,mi355x}.sh``, the
versions that produced the rows of ``benchmarks/data``; their ``sglang.launch_server`` lines):

* B200, SGLang, DeepSeek-R1 (fp4 and fp8, TP8): ``--scheduler-recv-interval 30`` when ``CONC >= 16``, else 10
  (fp8 TP4: 10); ``--chunked-prefill-size 16384`` (fp4) / ``--chunked-prefill-size 32768 --max-prefill-tokens
  32768`` (fp8 TP8) / 8192 (fp8 TP4).
* H200, SGLang, DeepSeek-R1 fp8: ``--chunked-prefill-size 32768 --max-prefill-tokens 32768``; receive interval
  left at its default (1).
* MI355X, SGLang, DeepSeek-R1 (fp4, fp8): ``--chunked-prefill-size 196608 --max-prefill-tokens 196608`` (fp4
  8k/1k at ``CONC > 32``: 32768) and ``--num-continuous-decode-steps 4``: the event loop runs 4 decode steps
  before it looks for new requests again, i.e. a receive interval of 4 decode steps.

* TensorRT-LLM with attention data parallelism (every ``dsr1_*_trt.sh`` / ``gptoss_*_trt.sh`` script, B200 and
  H200: ``DP_ATTENTION=true`` adds ``attention_dp_config: {enable_balance: true, timeout_iters: 60,
  batching_wait_iters: 0}``): context requests wait until every attention-DP rank has one, or 60 iterations
  (TensorRT-LLM ``_balance_adp_requests``), while every rank decodes.

Other stacks (vLLM, TensorRT-LLM without attention DP, ATOM) keep their profile's policy: their scripts set token
budgets at or near the simulator's 8192 default.

* TensorRT-LLM, GPT-OSS-120B (``gptoss_fp4_b200_trt.sh``): ``export TRTLLM_ENABLE_PDL=1``, kernels launched with
  Programmatic Dependent Launch (each kernel's launch and prologue overlap its predecessor's tail; Hopper and
  later). The DeepSeek-R1 TensorRT-LLM scripts (``dsr1_fp{4,8}_b200_trt.sh``) do not set it, nor do the vLLM and
  SGLang scripts. Not a scheduling flag: a cost-model one (:func:`launch_efficiency`: the chip's sourced
  ``pdl_kernel_saving_us`` and the chip family's fitted ``efficiency.pdl_kernel_fraction``).

Memory flags (issue #13 step 12, :func:`launch_memory`; the same scripts at the versions above): SGLang
``--mem-fraction-static`` B200 DeepSeek-R1 fp8 0.82 (TP8) / 0.95 (TP4, 8k/1k only), fp4 0.85; H200 fp8 0.82;
MI355X fp8 and fp4 0.8. TensorRT-LLM ``kv_cache_config.free_gpu_memory_fraction``: B200 DeepSeek-R1 fp8 0.8, 0.7
at ``CONC >= 256`` for 1k/1k and 1k/8k, 0.75 for 8k/1k at TP4; fp4 0.8; H200 fp8 0.75. The fp8 TensorRT-LLM
script also sets ``TLLM_OVERRIDE_LAYER_NUM=61`` ("avoids risk of OOM"): the MTP layer (layer 61) is not loaded,
as the cost model counts it (61 layers). Other rows keep their stack's default rule
(:data:`jalapeno.perf.frameworks.VLLM_MEMORY` etc.).

Prefill launch modes (issue #13 step 9, read from the same scripts; recorded, not modelled): vLLM on NVIDIA compiles
the model and replays piecewise CUDA graphs up to ``max-cudagraph-capture-size`` (B200 GPT-OSS: 2048 tokens); the
TensorRT-LLM PyTorch backend captures decode batches only (``cuda_graph_config``), so its prefill runs eagerly; the
SGLang scripts (B200, H200, MI355X) set neither ``--enable-torch-compile`` nor a piecewise CUDA graph flag; ATOM runs
its default compilation level 3 (an Inductor-compiled model) and replays graphs for decode only. The measured
fixed cost of a prefilling step does not follow these modes across vendors (docs/fidelity.md "Step 9").
"""

from __future__ import annotations

from jalapeno.calibration.points import SimSpec
from jalapeno.hardware.schema import Efficiency
from jalapeno.perf.frameworks import SchedulingPolicy, get_framework, memory_rule, scheduling_policy
from jalapeno.perf.types import MemoryRule

SCRIPTS = "InferenceX benchmark scripts (github.com/SemiAnalysisAI/InferenceX benchmarks/dsr1_*.sh, sglang.launch_server flags)"
TRT_SCRIPTS = ("InferenceX benchmark scripts (github.com/SemiAnalysisAI/InferenceX benchmarks/dsr1_*_trt.sh: "
               "attention_dp_config enable_balance true, timeout_iters 60, batching_wait_iters 0 with DP_ATTENTION)")
PDL_SCRIPTS = ("InferenceX benchmark scripts (github.com/SemiAnalysisAI/InferenceX benchmarks/gptoss_fp4_b200_trt.sh: "
               "export TRTLLM_ENABLE_PDL=1; benchmarks/dsr1_*_trt.sh do not set it)")
MEMORY_SCRIPTS = ("InferenceX benchmark scripts (github.com/SemiAnalysisAI/InferenceX benchmarks/dsr1_fp8_b200.sh, "
                  "dsr1_fp4_b200.sh, dsr1_fp8_h200.sh, dsr1_fp8_mi355x.sh, dsr1_fp4_mi355x.sh: --mem-fraction-static; "
                  "dsr1_fp8_b200_trt.sh, dsr1_fp4_b200_trt.sh, dsr1_fp8_h200_trt.sh: kv_cache_config."
                  "free_gpu_memory_fraction)")
#: TensorRT-LLM ``attention_dp_config.timeout_iters`` in every InferenceX TRT-LLM script with attention DP
TRT_BALANCE_TIMEOUT_ITERS = 60


def _sglang_launch(spec: SimSpec) -> dict:
    """The launch-flag overrides of an InferenceX SGLang DeepSeek-R1 run (empty: the stack's defaults)."""
    conc = spec.concurrency or 0
    if spec.chip == "b200":
        if spec.weights == "fp4":
            return {"recv_interval": 30 if conc >= 16 else 10, "max_prefill_tokens": 16384}
        if spec.layout.tp == 4:
            return {"recv_interval": 10, "max_prefill_tokens": 8192}
        return {"recv_interval": 30 if conc >= 16 else 10, "max_prefill_tokens": 32768}
    if spec.chip == "h200":
        return {"max_prefill_tokens": 32768}
    if spec.chip == "mi355x":
        big = spec.weights == "fp4" and spec.isl == 8192 and spec.osl == 1024 and conc > 32
        return {"recv_interval": 4, "max_prefill_tokens": 32768 if big else 196608}
    return {}


def _memory_fraction(spec: SimSpec, stack: str) -> float | None:
    """The memory fraction an InferenceX DeepSeek-R1 script passes (None: the stack's default)."""
    if not spec.model.startswith("deepseek"):
        return None
    if stack == "sglang":
        if spec.chip == "b200":
            return 0.85 if spec.weights == "fp4" else 0.95 if spec.layout.tp == 4 else 0.82
        return {"h200": 0.82, "mi355x": 0.8}.get(spec.chip)
    if stack == "trt-llm":
        if spec.chip == "b200":
            if spec.weights == "fp4":
                return 0.8
            if spec.isl == 1024 and spec.osl in (1024, 8192) and (spec.concurrency or 0) >= 256:
                return 0.7
            return 0.75 if (spec.isl, spec.osl) == (8192, 1024) and spec.layout.tp == 4 else 0.8
        return {"h200": 0.75}.get(spec.chip)
    return None


def launch_memory(spec: SimSpec) -> MemoryRule | None:
    """The memory rule one aggregated InferenceX point ran with: its stack's rule (vLLM / SGLang / TensorRT-LLM
    semantics, :func:`jalapeno.perf.frameworks.memory_rule`) with the fraction its script passes
    (:data:`MEMORY_SCRIPTS`). None for rows without a known framework profile (the simulator's default applies)."""
    from jalapeno.errors import ConfigError

    if spec.kind != "ix" or not spec.framework or getattr(spec, "disagg", None) is not None:
        return None
    try:
        fw = get_framework(spec.framework)
    except ConfigError:
        return None
    rule = memory_rule(fw, _memory_fraction(spec, fw.engine or fw.key))
    if rule is not None and _memory_fraction(spec, fw.engine or fw.key) is not None:
        rule = MemoryRule(rule.kind, rule.fraction, f"{rule.describe()}: {MEMORY_SCRIPTS}")
    return rule


def launch_policy(spec: SimSpec) -> SchedulingPolicy | None:
    """The scheduling policy one InferenceX point ran with: its framework profile's, with the launch flags of
    the benchmark script applied (:data:`SCRIPTS`). None for rows without a known framework profile."""
    from jalapeno.errors import ConfigError

    if spec.kind != "ix" or not spec.framework:
        return None
    try:
        fw = get_framework(spec.framework)
    except ConfigError:
        return None
    policy = scheduling_policy(fw)
    if (fw.engine or fw.key) == "sglang" and spec.model.startswith("deepseek"):
        over = _sglang_launch(spec)
        if over:
            policy = policy.with_(**over, source=f"{policy.source}; launch flags: {SCRIPTS}")
    if fw.key == "trt-llm" and spec.disagg is None and spec.layout.dp_attention and spec.layout.tp > 1:
        policy = policy.with_(balance_ranks=spec.layout.tp, balance_timeout_iters=TRT_BALANCE_TIMEOUT_ITERS,
                              source=f"{policy.source}; launch flags: {TRT_SCRIPTS}")
    return policy


def launches_with_pdl(spec: SimSpec) -> bool:
    """Whether the InferenceX script of this aggregated point launches its kernels with Programmatic Dependent
    Launch (:data:`PDL_SCRIPTS`: TensorRT-LLM serving GPT-OSS)."""
    return (spec.kind == "ix" and getattr(spec, "disagg", None) is None and spec.model.startswith("gpt-oss")
            and (spec.framework or "").split(" ")[0] in ("trt", "trt-llm", "trtllm"))


def launch_efficiency(spec: SimSpec, eff: Efficiency) -> Efficiency:
    """``eff`` with this point's cost-model launch flags set (``launch_pdl``: :func:`launches_with_pdl`)."""
    return eff.model_copy(update={"launch_pdl": True}) if launches_with_pdl(spec) else eff


__all__ = ["launch_memory", "MEMORY_SCRIPTS", "launch_policy", "launch_efficiency", "launches_with_pdl", "SCRIPTS", "TRT_SCRIPTS", "PDL_SCRIPTS",
           "TRT_BALANCE_TIMEOUT_ITERS"]
