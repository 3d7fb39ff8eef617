"""Which storage format each weight class uses, and which compute rate a chip runs it at.

Weight classes: ``attn`` (attention projections), ``mlp`` (dense MLP), ``experts`` (routed MoE experts),
``shared`` (shared experts). Embedding, LM head, router, norms and biases always stay 16-bit (as in the
published FP8/MXFP4 checkpoints and vLLM/SGLang quantization configs).
"""

from __future__ import annotations

from jalapeno.hardware.schema import ChipSpec
from jalapeno.models.arch import BYTES_PER_ELEMENT, ModelArch
from jalapeno.perf.types import Precision

LINEAR_CLASSES = ("attn", "mlp", "experts", "shared")

#: storage dtype -> compute dtypes to try, best first. Weight-only int4 dequantizes to 16-bit (W4A16); so does
#: MXFP4 on a chip without FP4 tensor cores (Hopper runs GPT-OSS's MXFP4 experts as bf16-activation x fp4-weight
#: kernels at the bf16 rate: vLLM/Triton matmul_ogs), which the fidelity benchmark's prefill errors confirmed.
_COMPUTE_CHAIN: dict[str, tuple[str, ...]] = {
    "mxfp4": ("fp4", "bf16", "fp16", "fp8", "int8"),
    "fp8": ("fp8", "bf16", "fp16", "int8"),
    "int4": ("bf16", "fp16", "fp8", "int8"),
    "bf16": ("bf16", "fp16", "fp8", "int8"),
    "fp16": ("fp16", "bf16", "fp8", "int8"),
    "fp32": ("fp32", "bf16", "fp16", "fp8", "int8"),
}
_CANON = {"fp4": "mxfp4", "bfloat16": "bf16", "float16": "fp16", "fp8_e4m3": "fp8"}


def _canon(dtype: str) -> str:
    d = _CANON.get(dtype, dtype)
    if d not in BYTES_PER_ELEMENT:
        return "bf16"
    return d


def weight_dtypes(model: ModelArch, precision: Precision) -> dict[str, str]:
    """Storage dtype per linear weight class (see module doc)."""
    native = _canon(model.native_weight_dtype)
    scope = model.native_quant_scope if native not in ("bf16", "fp16", "fp32") else "none"
    if scope == "all":
        base = {c: native for c in LINEAR_CLASSES}
    elif scope == "experts":
        base = {c: ("bf16" if c != "experts" else native) for c in LINEAR_CLASSES}
    else:
        base = {c: "bf16" for c in LINEAR_CLASSES}
    w = precision.weights
    if w == "native":
        return base
    if w in ("bf16", "fp8", "fp32"):
        return {c: w for c in LINEAR_CLASSES}
    q = "mxfp4" if w in ("fp4", "mxfp4") else "int4"
    if model.num_experts > 0:  # InferenceX 'fp4': only routed experts are quantized, the rest stays native
        return {**base, "experts": q}
    return {c: q for c in LINEAR_CLASSES}


def weight_bytes_per_element(dtype: str, model: ModelArch | None = None) -> float:
    """Bytes per weight element including block scales; the model's own native layout when it declares one."""
    d = _canon(dtype)
    own = getattr(model, "native_bytes_per_element", None) if model is not None else None
    if own and model is not None and d == _canon(model.native_weight_dtype):
        return float(own)
    return BYTES_PER_ELEMENT[d]


def kv_bytes_per_element(kv: str) -> float:
    return {"fp8": 1.0, "fp32": 4.0}.get(kv, 2.0)


def compute_dtype(chip: ChipSpec, storage: str) -> str:
    """The dtype whose peak rate a GEMM on ``storage`` weights runs at on ``chip`` (first native in the chain)."""
    for d in _COMPUTE_CHAIN.get(_canon(storage), _COMPUTE_CHAIN["bf16"]):
        if chip.peak_flops(d) > 0:
            return d
    # a chip must list at least one dtype; fall back to its fastest one
    return max(chip.compute_tflops, key=lambda d: chip.peak_flops(d))


def attention_dtype(chip: ChipSpec) -> str:
    """Attention math (QK^T, PV) runs at 16-bit whatever the KV storage (documented choice)."""
    return compute_dtype(chip, "bf16")
