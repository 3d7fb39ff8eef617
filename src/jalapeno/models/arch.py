"""One architecture description for every model family the project knows.

:class:`ModelArch` is what the cost model, the simulator and the engine read; it is built from a Hugging Face
``config.json`` by :func:`jalapeno.models.config.arch_from_config` (never by hand outside tests).
Counting methods (parameters, KV bytes) live on the dataclass so every layer agrees on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Family = Literal["llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3"]
AttentionKind = Literal["gqa", "mla"]
LayerAttn = Literal["full", "sliding"]

#: Weight/KV storage formats the project understands, with bytes per element *including* block scales.
#:   fp8  = E4M3 with one fp32 scale per 128x128 block (DeepSeek)        -> 1 + 4/16384
#:   mxfp4 = E2M1 packed two per byte, one E8M0 (1 byte) scale per 32    -> 0.5 + 1/32
#:   int4 = packed two per byte, one bf16 scale per group of 128          -> 0.5 + 2/128
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0 + 4.0 / (128 * 128),
    "fp8_per_tensor": 1.0,
    "mxfp4": 0.5 + 1.0 / 32,
    "int4": 0.5 + 2.0 / 128,
    "int8": 1.0,
}


@dataclass(frozen=True)
class ModelArch:
    """Architecture of a decoder-only transformer LM (dense GQA, MoE, MLA, sliding window, sinks)."""

    name: str
    family: Family
    model_type: str  # the config's model_type, e.g. "deepseek_v3"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP (and DeepSeek's first dense layers)
    max_position_embeddings: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    attention: AttentionKind = "gqa"
    attention_bias: bool = False  # q/k/v (and o for gpt-oss) biases
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm on q and k per head
    # --- sliding window / sinks (GPT-OSS, Mistral-style) ---
    sliding_window: int | None = None
    #: per-layer attention kind, length num_layers ("full" or "sliding")
    layer_types: tuple[LayerAttn, ...] = ()
    attention_sinks: bool = False  # GPT-OSS: learned per-head sink logit
    # --- MLA (DeepSeek-V3 / Kimi K2) ---
    q_lora_rank: int | None = None  # None: plain q projection
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # --- MoE ---
    num_experts: int = 0  # routed experts; 0 = dense model
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0  # per shared expert (defaults to moe_intermediate_size)
    first_dense_layers: int = 0  # DeepSeek first_k_dense_replace
    moe_layer_freq: int = 1
    router: Literal["softmax_topk", "sigmoid_group_topk", "none"] = "none"
    n_group: int = 1
    topk_group: int = 1
    router_bias: bool = False  # GPT-OSS router has a bias
    # --- extras ---
    mtp_layers: int = 0  # DeepSeek num_nextn_predict_layers (not counted in total_params)
    #: weights as the published checkpoint stores them: "bf16", "fp8" (block-scaled), "mxfp4" (experts only)
    native_weight_dtype: str = "bf16"
    #: which weights the native quantization covers: "all" linear layers or only "experts"
    native_quant_scope: Literal["none", "all", "experts"] = "none"
    activation: str = "silu"
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    # ---------------------------------------------------------------------------------------------
    def is_moe_layer(self, i: int) -> bool:
        if self.num_experts == 0:
            return False
        return i >= self.first_dense_layers and (i % max(self.moe_layer_freq, 1) == 0)

    def is_sliding_layer(self, i: int) -> bool:
        return bool(self.layer_types) and self.layer_types[i] == "sliding"

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))
