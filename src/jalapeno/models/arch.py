"""One architecture description for every model family the project knows.

:class:`ModelArch` is what the cost model, the simulator and the engine read; it is built from a Hugging Face
``config.json`` by :func:`jalapeno.models.hf_config.arch_from_config` (never by hand outside tests).
Counting methods (parameters, KV bytes) live on the dataclass so every layer agrees on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from jalapeno.errors import UnknownNameError

Family = Literal[
    "llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "minimax_m2", "qwen3_5_moe",
    "glm_moe_dsa",
]
AttentionKind = Literal["gqa", "mla"]
LayerAttn = Literal["full", "sliding", "linear"]

#: bytes one token's indexer key takes in one DSA layer: fp8 keys + one fp32 scale per 128-wide key
#: (vLLM / SGLang DeepSeek-V3.2 indexer cache layout), whatever the KV-cache dtype
INDEXER_KEY_SCALE_BYTES = 4.0

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

#: KV-cache storage formats, bytes per element. fp8 KV uses one scale per tensor (vLLM ``--kv-cache-dtype fp8``),
#: so its scale overhead is negligible and not counted.
KV_BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
}

_FULL_PRECISION = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling: HF ``rope_scaling`` / ``rope_parameters`` (``type`` read as ``rope_type``).

    ``rope_type`` is ``default`` (none), ``linear``, ``llama3`` or ``yarn`` for the models served here; fields a
    type does not use stay None. The base frequency is :attr:`ModelArch.rope_theta`."""

    rope_type: str = "default"
    factor: float | None = None
    #: context the frequencies were trained for (llama3, yarn); defaults to max_position_embeddings
    original_max_position_embeddings: int | None = None
    low_freq_factor: float | None = None  # llama3
    high_freq_factor: float | None = None  # llama3
    beta_fast: float | None = None  # yarn
    beta_slow: float | None = None  # yarn
    mscale: float | None = None  # yarn (DeepSeek)
    mscale_all_dim: float | None = None  # yarn (DeepSeek): also scales MLA's softmax
    attention_factor: float | None = None  # yarn: explicit cos/sin scale
    truncate: bool = True  # yarn: round the correction range to whole dims (GPT-OSS: false)


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
    head_dim: int  # MLA: qk_nope_head_dim + qk_rope_head_dim (query/key width; the cache holds the latent)
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
    #: o_proj bias; None = same as ``attention_bias`` (Llama/Qwen3/GPT-OSS/DeepSeek). Qwen2: qkv bias, no o bias.
    o_proj_bias: bool | None = None
    #: explicit per-layer MoE flags (length num_layers); empty = use first_dense_layers/moe_layer_freq.
    #: Needed for Qwen3-MoE's ``mlp_only_layers``/``decoder_sparse_step``, whose rule differs from DeepSeek's.
    moe_layers: tuple[bool, ...] = ()
    #: bytes per quantized element of the native format when the checkpoint's block/group layout differs
    #: from the canonical one in BYTES_PER_ELEMENT (e.g. Kimi K2.5 int4 with a bf16 scale per 32 -> 0.5625)
    native_bytes_per_element: float | None = None
    # --- attention variants of the 2026 models (MiniMax-M2.5, Qwen3.5, GLM-5) ---
    #: q/k RMSNorm over all heads of the layer (MiniMax-M2 ``qk_norm_type: per_layer``) instead of per head
    qk_norm_per_layer: bool = False
    #: Qwen3.5/Qwen3-Next gated attention: q_proj also emits a sigmoid output gate (doubles its width)
    attn_output_gate: bool = False
    #: linear-attention (Gated DeltaNet) layers, ``layer_types`` "linear": q/k heads, v heads, head dims, conv
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    #: dtype of the recurrent state (``mamba_ssm_dtype``); the conv state stays 16-bit
    linear_state_dtype: str = "fp32"
    #: DeepSeek sparse attention (DSA): each query attends its ``index_topk`` best keys, chosen by an indexer
    #: with ``index_n_heads`` heads of width ``index_head_dim`` (0 = dense attention)
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    #: Qwen3.5-MoE: a sigmoid gate (1 x hidden) scales the shared expert's output
    shared_expert_gate: bool = False
    # --- what running the model needs beyond the counts (the torch backend builds its modules from these) ---
    rope_scaling: RopeScaling = RopeScaling()
    norm_topk_prob: bool = True  # renormalise the top-k routing weights (Qwen3-MoE: config; DeepSeek: config)
    routed_scaling_factor: float = 1.0  # DeepSeek: routed expert weights are scaled by this
    swiglu_limit: float | None = None  # GPT-OSS clamped SwiGLU (None: plain SwiGLU)
    rope_interleave: bool = True  # MLA: rope pairs (2i, 2i+1) instead of rotate-half
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    # ---------------------------------------------------------------------------------------------
    def is_moe_layer(self, i: int) -> bool:
        if self.num_experts == 0:
            return False
        if self.moe_layers:
            return self.moe_layers[i]
        return i >= self.first_dense_layers and (i % max(self.moe_layer_freq, 1) == 0)

    def is_sliding_layer(self, i: int) -> bool:
        return bool(self.layer_types) and self.layer_types[i] == "sliding"

    def is_linear_layer(self, i: int) -> bool:
        """True for a linear-attention (Gated DeltaNet) layer: a per-sequence state, no KV cache."""
        return bool(self.layer_types) and self.layer_types[i] == "linear"

    @property
    def num_linear_layers(self) -> int:
        return sum(self.is_linear_layer(i) for i in range(self.num_layers))

    @property
    def attention_window(self) -> int | None:
        """Most keys one query attends in a capped layer: the sliding window, or DSA's ``index_topk``
        (the cost model prices both with the same windowed sums); None when every layer is dense."""
        return self.sliding_window or self.index_topk or None

    @property
    def linear_conv_dim(self) -> int:
        """Channels of the Gated DeltaNet causal conv: q and k (key heads) and v (value heads)."""
        return 2 * self.linear_num_key_heads * self.linear_key_head_dim + self.linear_value_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    def linear_state_bytes(self, state_dtype: str | None = None, conv_dtype: str = "bf16") -> float:
        """Recurrent state one sequence holds in ONE linear-attention layer, whatever its length: the
        delta-rule state (v heads x key dim x value dim, ``linear_state_dtype``) + the conv window
        ((kernel - 1) x conv channels, 16-bit)."""
        if not self.linear_num_value_heads:
            return 0.0
        ssm = self.linear_num_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
        conv = (self.linear_conv_kernel - 1) * self.linear_conv_dim
        return ssm * _kv_bytes(state_dtype or self.linear_state_dtype) + conv * _kv_bytes(conv_dtype)

    def state_bytes_per_sequence(self) -> float:
        """Recurrent state bytes of one sequence summed over the linear-attention layers (0 without)."""
        return self.linear_state_bytes() * self.num_linear_layers

    @property
    def indexer_bytes_per_token_layer(self) -> float:
        """DSA indexer cache: bytes one token's indexer key takes in one layer (0 without DSA)."""
        return self.index_head_dim + INDEXER_KEY_SCALE_BYTES if self.index_topk else 0.0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    # ---------------------------------------------------------------------------------------------
    # Parameter counting. Counts are exact element counts of the Hugging Face module tree (every weight,
    # bias, norm, router and sink; buffers such as DeepSeek's e_score_correction_bias are not parameters).
    @property
    def attn_o_bias(self) -> bool:
        return self.attention_bias if self.o_proj_bias is None else self.o_proj_bias

    def _attn_params(self) -> tuple[int, int]:
        """(linear weights, other) of one attention block: other = biases, q/k/latent norms, sinks."""
        h = self.hidden_size
        other = 0
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                w = h * self.q_lora_rank + self.q_lora_rank * self.num_heads * qk
                other += self.q_lora_rank + (self.q_lora_rank if self.attention_bias else 0)
            else:
                w = h * self.num_heads * qk
            kv_a = self.kv_lora_rank + self.qk_rope_head_dim
            w += h * kv_a + self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
            w += self.num_heads * self.v_head_dim * h
            other += self.kv_lora_rank  # kv_a_layernorm
            if self.index_topk:  # DSA indexer: wq_b (from the q latent), wk, LayerNorm(k), weights_proj
                iq = self.index_n_heads * self.index_head_dim
                w += (self.q_lora_rank or h) * iq + h * self.index_head_dim
                other += 2 * self.index_head_dim + h * self.index_n_heads
            if self.attention_bias:
                other += kv_a
            if self.attn_o_bias:
                other += h
        else:
            q_out = self.num_heads * self.head_dim
            kv_out = self.num_kv_heads * self.head_dim
            w = h * q_out + 2 * h * kv_out + q_out * h
            if self.attn_output_gate:
                w += h * q_out
            if self.attention_bias:
                other += q_out + 2 * kv_out
            if self.attn_o_bias:
                other += h
            if self.qk_norm and self.qk_norm_per_layer:
                other += q_out + kv_out
            elif self.qk_norm:
                other += 2 * self.head_dim
        if self.attention_sinks:
            other += self.num_heads
        return w, other

    def _linear_attn_params(self) -> tuple[int, int]:
        """(linear weights, other) of one Gated DeltaNet block: in_proj qkv, z, b, a and out_proj; other =
        the depthwise conv, A_log, dt_bias and the gated RMSNorm (one value-head wide)."""
        h, nv = self.hidden_size, self.linear_num_value_heads
        w = h * (self.linear_conv_dim + self.linear_value_dim + 2 * nv) + self.linear_value_dim * h
        other = self.linear_conv_dim * self.linear_conv_kernel + 2 * nv + self.linear_value_head_dim
        return w, other

    def _mlp_params(self, inter: int) -> tuple[int, int]:
        """(weights, biases) of one gated (SwiGLU) MLP of width ``inter``: gate, up, down."""
        h = self.hidden_size
        return 3 * h * inter, (2 * inter + h) if self.mlp_bias else 0

    @property
    def expert_params(self) -> int:
        """Parameters of ONE routed expert (weights + biases)."""
        w, b = self._mlp_params(self.moe_intermediate_size)
        return w + b

    @property
    def shared_expert_params(self) -> int:
        """Parameters of all shared experts of one MoE layer (DeepSeek fuses them into one MLP)."""
        inter = self.shared_expert_intermediate_size or self.moe_intermediate_size
        return self.num_shared_experts * 3 * self.hidden_size * inter

    @property
    def router_params(self) -> int:
        """Router (gate) parameters of one MoE layer (+ Qwen3.5's shared-expert gate)."""
        gate = self.hidden_size if self.shared_expert_gate else 0
        return self.num_experts * self.hidden_size + (self.num_experts if self.router_bias else 0) + gate

    def param_counts(self) -> "ParamCounts":
        """Per-component parameter counts of the main model (MTP module excluded)."""
        h = self.hidden_size
        attn_w, attn_o = self._attn_params()
        dense_w, dense_b = self._mlp_params(self.intermediate_size)
        exp_w, exp_b = self._mlp_params(self.moe_intermediate_size)
        n_moe = self.num_moe_layers
        n_dense = self.num_layers - n_moe
        n_lin = self.num_linear_layers
        lin_w, lin_o = self._linear_attn_params() if n_lin else (0, 0)
        return ParamCounts(
            embedding=self.vocab_size * h,
            lm_head=0 if self.tie_word_embeddings else self.vocab_size * h,
            final_norm=h,
            layer_norms=2 * h * self.num_layers,
            attn_weights=attn_w * (self.num_layers - n_lin) + lin_w * n_lin,
            attn_other=attn_o * (self.num_layers - n_lin) + lin_o * n_lin,
            mlp_weights=dense_w * n_dense,
            mlp_other=dense_b * n_dense,
            shared_expert_weights=self.shared_expert_params * n_moe,
            routed_expert_weights=exp_w * self.num_experts * n_moe,
            routed_expert_other=exp_b * self.num_experts * n_moe,
            router=self.router_params * n_moe,
            routed_active=(exp_w + exp_b) * self.experts_per_token * n_moe,
        )

    def total_params(self) -> int:
        """All parameters of the main model: embeddings, every layer, final norm, LM head unless tied.
        Excludes the MTP module (see :meth:`mtp_params`)."""
        return self.param_counts().total

    def active_params(self, include_embedding: bool = False) -> int:
        """Parameters used per token: everything but the routed experts, plus ``experts_per_token`` of them
        per MoE layer (shared experts always count). The input embedding table is a lookup, not a matmul,
        so by default it is excluded (OpenAI's and DeepSeek's convention: the LM head counts, the embedding
        does not); ``include_embedding=True`` counts it too (Qwen's and Mistral's convention). A tied
        embedding is counted once, as the LM head."""
        c = self.param_counts()
        active = c.total - c.routed_expert_weights - c.routed_expert_other + c.routed_active
        if not include_embedding and not self.tie_word_embeddings:
            active -= c.embedding
        return active

    def mtp_params(self) -> int:
        """Parameters of the multi-token-prediction module (DeepSeek ``num_nextn_predict_layers``): per MTP
        layer one decoder layer (MoE when the model has experts) + enorm + hnorm + eh_proj (2h->h) +
        shared_head.norm. Its embedding and head are shared with the main model and not counted again."""
        if not self.mtp_layers:
            return 0
        h = self.hidden_size
        attn_w, attn_o = self._attn_params()
        if self.num_experts:
            ffn = self.router_params + self.num_experts * self.expert_params + self.shared_expert_params
        else:
            ffn = sum(self._mlp_params(self.intermediate_size))
        layer = 2 * h + attn_w + attn_o + ffn
        return self.mtp_layers * (layer + 2 * h + 2 * h * h + h)

    # ---------------------------------------------------------------------------------------------
    # Weight bytes
    def weight_bytes(self, weight_dtype: str = "native", scope: str | None = None) -> float:
        """Bytes of all weights (main model) stored as ``weight_dtype``, block scales included.

        ``"native"`` = as the published checkpoint stores them (``native_weight_dtype`` over
        ``native_quant_scope``). A full-precision dtype (fp32/bf16/fp16) applies to every parameter. A
        quantized dtype applies to ``scope``: ``"all"`` = every linear layer inside the decoder blocks
        (attention projections, dense MLP, shared and routed experts), ``"experts"`` = routed experts only;
        the default is the native scope when ``weight_dtype`` is the native dtype, else ``"all"``. What is
        not quantized (embeddings, LM head, norms, biases, router, sinks) stays bf16."""
        dtype, scope = self._resolve_weight_dtype(weight_dtype, scope)
        c = self.param_counts()
        if dtype in _FULL_PRECISION:
            return c.total * BYTES_PER_ELEMENT[dtype]
        q = c.quantizable(scope)
        return q * self._quant_bytes(dtype) + (c.total - q) * BYTES_PER_ELEMENT["bf16"]

    def active_weight_bytes(self, weight_dtype: str = "native", scope: str | None = None) -> float:
        """Weight bytes touched by one token (``active_params(include_embedding=False)`` worth): the
        batch-1 decode weight read. Routed experts contribute ``experts_per_token`` experts per layer."""
        dtype, scope = self._resolve_weight_dtype(weight_dtype, scope)
        c = self.param_counts()
        active = self.active_params()
        if dtype in _FULL_PRECISION:
            return active * BYTES_PER_ELEMENT[dtype]
        e_w = 3 * self.hidden_size * self.moe_intermediate_size
        routed_w_active = e_w * self.experts_per_token * self.num_moe_layers
        q = c.quantizable(scope) - c.routed_expert_weights + routed_w_active
        return q * self._quant_bytes(dtype) + (active - q) * BYTES_PER_ELEMENT["bf16"]

    def _quant_bytes(self, dtype: str) -> float:
        if dtype == self.native_weight_dtype and self.native_bytes_per_element is not None:
            return self.native_bytes_per_element
        return BYTES_PER_ELEMENT[dtype]

    def _resolve_weight_dtype(self, weight_dtype: str, scope: str | None) -> tuple[str, str]:
        dtype = self.native_weight_dtype if weight_dtype == "native" else weight_dtype
        if dtype not in BYTES_PER_ELEMENT:
            raise UnknownNameError(
                f"unknown weight dtype {weight_dtype!r}; use 'native' or one of: {', '.join(BYTES_PER_ELEMENT)}"
            )
        if scope is None:
            native = dtype == self.native_weight_dtype and self.native_quant_scope != "none"
            scope = self.native_quant_scope if native else "all"
        if scope not in ("all", "experts"):
            raise UnknownNameError(f"unknown quantization scope {scope!r}; use 'all' or 'experts'")
        return dtype, scope

    # ---------------------------------------------------------------------------------------------
    # KV cache
    def kv_elems_per_token_layer(self) -> int:
        """KV-cache elements one token stores in one layer: 2·kv_heads·head_dim (GQA) or the MLA latent
        kv_lora_rank + qk_rope_head_dim (compressed KV plus the shared rope key)."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token_layer(self, kv_dtype: str = "bf16") -> float:
        """KV-cache bytes one token stores in one attention layer (+ the DSA indexer key, fp8 + scale)."""
        return self.kv_elems_per_token_layer() * _kv_bytes(kv_dtype) + self.indexer_bytes_per_token_layer

    def kv_bytes(self, context_len: int, kv_dtype: str = "bf16") -> float:
        """Bytes of KV cache one sequence of ``context_len`` tokens holds, summed over layers; a sliding
        layer holds at most ``sliding_window`` tokens, a linear-attention layer none (it holds a constant
        state instead: :meth:`state_bytes_per_sequence`). A DSA layer keeps every token (it reads top-k)."""
        per = self.kv_bytes_per_token_layer(kv_dtype)
        n_sliding = sum(self.is_sliding_layer(i) for i in range(self.num_layers))
        n_full = self.num_layers - n_sliding - self.num_linear_layers
        window = self.sliding_window if self.sliding_window else context_len
        return per * (n_full * context_len + n_sliding * min(context_len, window))

    def kv_bytes_per_token(self, kv_dtype: str = "bf16", context_len: int | None = None) -> float:
        """KV bytes per token summed over the layers that keep a KV cache (not linear-attention layers).
        Without ``context_len``: every such layer stores the token (the marginal cost while the context is
        shorter than the window). With ``context_len``: the per-token average ``kv_bytes(context_len) /
        context_len``, sliding layers capped at the window."""
        if context_len is None:
            return self.kv_bytes_per_token_layer(kv_dtype) * (self.num_layers - self.num_linear_layers)
        if context_len <= 0:
            raise ValueError("context_len must be positive")
        return self.kv_bytes(context_len, kv_dtype) / context_len


def _kv_bytes(kv_dtype: str) -> float:
    try:
        return KV_BYTES_PER_ELEMENT[kv_dtype]
    except KeyError:
        raise UnknownNameError(
            f"unknown KV-cache dtype {kv_dtype!r}; use one of: {', '.join(KV_BYTES_PER_ELEMENT)}"
        ) from None


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of a model by component (main model, MTP excluded). ``*_weights`` are the linear
    layers a weight quantization covers; ``*_other`` are biases, norms and sinks (kept in bf16)."""

    embedding: int
    lm_head: int  # 0 when tied to the embedding
    final_norm: int
    layer_norms: int  # input + post-attention RMSNorm of every layer
    attn_weights: int
    attn_other: int  # attention biases, q/k norms, MLA latent norms, sinks
    mlp_weights: int  # dense MLP layers
    mlp_other: int
    shared_expert_weights: int
    routed_expert_weights: int  # all routed experts of all MoE layers
    routed_expert_other: int  # routed expert biases (GPT-OSS)
    router: int  # router weight (+ bias)
    routed_active: int  # routed expert params (weights + biases) used per token: top-k per MoE layer

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self) if f.name != "routed_active")

    def quantizable(self, scope: str) -> int:
        """Parameters a weight quantization of ``scope`` ("all" or "experts") covers."""
        if scope == "experts":
            return self.routed_expert_weights
        return self.attn_weights + self.mlp_weights + self.shared_expert_weights + self.routed_expert_weights
