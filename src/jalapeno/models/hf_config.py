"""Hugging Face ``config.json`` -> :class:`~jalapeno.models.arch.ModelArch`.

The one place a config.json is read: the cost model, the simulator and the torch backend all build from the
:class:`ModelArch` this returns, through the one family table :data:`FAMILIES`.
Covers the model types the project serves: ``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``qwen3_moe``, ``mixtral``,
``gpt_oss``, ``deepseek_v3`` and the DeepSeek-V3 derivatives ``kimi_k2`` / ``kimi_k25`` (the latter a
multimodal wrapper whose ``text_config`` holds the language model), and the 2026 families: ``minimax_m2``
(MiniMax-M2.x: GQA with per-layer q/k norms, 256 sigmoid-routed experts), ``qwen3_5_moe`` / ``qwen3_next``
(hybrid Gated DeltaNet linear attention + gated full attention, MoE with a gated shared expert) and
``glm_moe_dsa`` (GLM-5: MLA + DeepSeek sparse attention). Accepts both the classic field names
(``rope_theta``, ``num_experts``) and the transformers-5 spellings (``rope_parameters``, ``num_local_experts``).
No torch import: this runs in the simulator without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jalapeno.errors import ConfigError
from jalapeno.models.arch import Family, LayerAttn, ModelArch, RopeScaling

#: config ``model_type`` -> architecture family
FAMILIES: dict[str, Family] = {
    "llama": "llama",
    "mistral": "llama",  # Llama blocks; a set sliding_window applies to every layer
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3_moe",
    "mixtral": "mixtral",
    "gpt_oss": "gpt_oss",
    "deepseek_v3": "deepseek_v3",
    "kimi_k2": "deepseek_v3",
    "kimi_k25": "deepseek_v3",
    "minimax_m2": "minimax_m2",
    "qwen3_5_moe": "qwen3_5_moe",
    "qwen3_5_moe_text": "qwen3_5_moe",
    "qwen3_next": "qwen3_5_moe",
    "glm_moe_dsa": "glm_moe_dsa",
}

_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16", "float": "fp32"}
_LAYER_TYPES: dict[str, LayerAttn] = {
    "full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear",
    "indexed_attention": "full",  # transformers' GLM-5 spelling: full attention with a DSA indexer
}


class _Fields:
    """Typed access to a config dict; every problem becomes a one-line :class:`ConfigError`."""

    def __init__(self, cfg: Mapping[str, Any], where: str, model_type: str) -> None:
        self.cfg, self.where, self.model_type = cfg, where, model_type

    def _fail(self, msg: str) -> ConfigError:
        return ConfigError(f"{self.where} (model_type {self.model_type!r}): {msg}")

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def int(self, key: str, default: int | None = None, *, min_value: int = 1) -> int:
        val = self.cfg.get(key)
        if val is None:
            if default is None:
                raise self._fail(f"missing required field {key!r}; add it to the config.json")
            return default
        if isinstance(val, bool) or not isinstance(val, (int, float)) or int(val) != val:
            raise self._fail(f"field {key!r} must be an integer, got {val!r}")
        if val < min_value:
            raise self._fail(f"field {key!r} must be >= {min_value}, got {val!r}")
        return int(val)

    def float(self, key: str, default: float) -> float:
        val = self.cfg.get(key)
        if val is None:
            return default
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            raise self._fail(f"field {key!r} must be a number, got {val!r}")
        return float(val)

    def bool(self, key: str, default: bool) -> bool:
        val = self.cfg.get(key)
        if val is None:
            return default
        if not isinstance(val, bool):
            raise self._fail(f"field {key!r} must be true or false, got {val!r}")
        return val

    def first_int(self, *keys: str, default: int | None = None, min_value: int = 1) -> int:
        """The first of ``keys`` present (alternative spellings of one field)."""
        for key in keys:
            if self.has(key):
                return self.int(key, min_value=min_value)
        if default is None:
            raise self._fail(f"missing required field {keys[0]!r}; add it to the config.json")
        return default


def unwrap_config(cfg: Mapping[str, Any]) -> tuple[dict, dict]:
    """Split a catalogue wrapper ``{"model", "sources", "confidence", "config"}`` into (config, provenance);
    a plain config.json comes back unchanged with empty provenance."""
    if "config" in cfg and "model_type" not in cfg and isinstance(cfg["config"], Mapping):
        prov = {k: v for k, v in cfg.items() if k != "config"}
        return dict(cfg["config"]), prov
    return dict(cfg), {}


def arch_from_config(cfg: Mapping[str, Any], name: str | None = None, *, source: str | None = None) -> ModelArch:
    """Build a :class:`ModelArch` from a Hugging Face config dict (or a catalogue wrapper around one).

    ``name`` names the model (default: the config's ``_name_or_path`` or ``model_type``); ``source`` is the
    file it came from, used in error messages. Raises :class:`ConfigError` for an unsupported ``model_type``
    or a missing/invalid required field.
    """
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{source or name or 'config'}: expected a JSON object, got {type(cfg).__name__}")
    cfg, prov = unwrap_config(cfg)
    name = name or cfg.get("_name_or_path") or str(cfg.get("model_type") or "model")
    where = f"{name}" + (f" ({source})" if source and source != name else "")
    model_type = cfg.get("model_type")
    if not model_type:
        raise ConfigError(f"{where}: config has no 'model_type'; is this a Hugging Face config.json?")
    extra: dict[str, Any] = {}
    if prov:
        extra["provenance"] = prov
    if model_type not in FAMILIES:
        raise ConfigError(
            f"{where}: unsupported model_type {model_type!r}; supported: {', '.join(sorted(FAMILIES))}"
        )
    body: Mapping[str, Any] = cfg
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and text:  # multimodal wrapper: the language model lives in text_config
        body = text
        extra["text_model_type"] = text.get("model_type")
        extra["multimodal"] = True  # the vision tower is not part of the arch (nor of its counts)
    elif model_type == "kimi_k25":
        raise ConfigError(f"{where} (model_type {model_type!r}): missing required field 'text_config'")
    family = FAMILIES[model_type]
    f = _Fields(body, where, model_type)
    return _build(f, name, model_type, family, extra)


def _build(f: _Fields, name: str, model_type: str, family: Family, extra: dict[str, Any]) -> ModelArch:
    cfg = f.cfg
    hidden = f.int("hidden_size")
    layers = f.int("num_hidden_layers")
    heads = f.int("num_attention_heads")
    kv_heads = f.int("num_key_value_heads", heads)
    if heads % kv_heads:
        raise f._fail(f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads})")
    kw: dict[str, Any] = dict(
        name=name,
        family=family,
        model_type=model_type,
        vocab_size=f.int("vocab_size"),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        max_position_embeddings=f.int("max_position_embeddings"),
        rms_norm_eps=f.float("rms_norm_eps", 1e-6),
        rope_theta=_rope_theta(cfg),
        tie_word_embeddings=f.bool("tie_word_embeddings", False),
        attention_bias=f.bool("attention_bias", False),
        mlp_bias=f.bool("mlp_bias", False),
        activation=str(cfg.get("hidden_act") or "silu"),
    )
    if family in ("deepseek_v3", "glm_moe_dsa"):
        _mla(f, kw)
    else:
        if f.has("head_dim"):
            kw["head_dim"] = f.int("head_dim")
        elif hidden % heads:
            raise f._fail(f"no 'head_dim' and hidden_size ({hidden}) is not a multiple of heads ({heads})")
        else:
            kw["head_dim"] = hidden // heads
        # Qwen3.5-MoE has no dense MLP layers and no intermediate_size: its experts' width stands in
        dense_default = f.int("moe_intermediate_size") if family == "qwen3_5_moe" else None
        kw["intermediate_size"] = f.int("intermediate_size", dense_default)
    if family == "qwen2":
        kw["attention_bias"], kw["o_proj_bias"] = True, False  # Qwen2: q/k/v biased, o not
    if family in ("qwen3", "qwen3_moe", "qwen3_5_moe"):
        kw["qk_norm"] = True
    if family == "minimax_m2" and f.bool("use_qk_norm", False):
        kw["qk_norm"] = True
        kw["qk_norm_per_layer"] = cfg.get("qk_norm_type", "per_layer") == "per_layer"
    _moe(f, family, kw)
    _sliding(f, family, layers, kw)
    if "linear" in kw["layer_types"]:
        _linear_attention(f, kw)
    if family == "qwen3_5_moe":
        kw["attn_output_gate"] = f.bool("attn_output_gate", True)  # Qwen3-Next: always gated
    if family == "glm_moe_dsa" or f.has("index_topk"):
        _sparse_attention(f, kw)
    if family == "gpt_oss":
        kw.update(attention_sinks=True, router_bias=True, mlp_bias=True)  # expert + router biases, sinks
        extra["swiglu_limit"] = cfg.get("swiglu_limit")
        kw["swiglu_limit"] = f.float("swiglu_limit", 7.0)
    _running(f, family, kw)
    kw["mtp_layers"] = _mtp_layers(f)
    _quant(f, kw, extra)
    if cfg.get("rope_scaling") or cfg.get("rope_parameters"):
        extra["rope_scaling"] = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    return ModelArch(**kw, extra=extra)


def _mtp_layers(f: _Fields) -> int:
    """Multi-token-prediction layers: DeepSeek/GLM ``num_nextn_predict_layers``, Qwen3.5/Qwen3-Next
    ``mtp_num_hidden_layers``, MiniMax-M2 ``num_mtp_modules`` x ``mtp_transformer_layers`` (when ``use_mtp``)."""
    if f.has("num_nextn_predict_layers"):
        return f.int("num_nextn_predict_layers", min_value=0)
    if f.has("mtp_num_hidden_layers"):
        return f.int("mtp_num_hidden_layers", min_value=0)
    if f.bool("use_mtp", False):
        return f.int("num_mtp_modules", 1, min_value=0) * f.int("mtp_transformer_layers", 1, min_value=0)
    return 0


def _linear_attention(f: _Fields, kw: dict[str, Any]) -> None:
    """Gated DeltaNet layers (Qwen3.5 / Qwen3-Next): head counts and widths, conv kernel, state dtype."""
    nk, nv = f.int("linear_num_key_heads"), f.int("linear_num_value_heads")
    if nv % nk:
        raise f._fail(f"linear_num_value_heads ({nv}) is not a multiple of linear_num_key_heads ({nk})")
    state = _TORCH_DTYPES.get(str(f.cfg.get("mamba_ssm_dtype") or "float32"))
    if state is None:
        raise f._fail(f"unsupported mamba_ssm_dtype {f.cfg.get('mamba_ssm_dtype')!r}; use float32 or bfloat16")
    kw.update(
        linear_num_key_heads=nk,
        linear_num_value_heads=nv,
        linear_key_head_dim=f.int("linear_key_head_dim"),
        linear_value_head_dim=f.int("linear_value_head_dim"),
        linear_conv_kernel=f.int("linear_conv_kernel_dim"),
        linear_state_dtype=state,
    )


def _sparse_attention(f: _Fields, kw: dict[str, Any]) -> None:
    """DeepSeek sparse attention (GLM-5, DeepSeek-V3.2): indexer heads/width and the top-k keys per query."""
    if kw.get("attention") != "mla":
        raise f._fail("'index_topk' (DeepSeek sparse attention) is only supported with MLA (kv_lora_rank)")
    shared = [t for t in f.cfg.get("indexer_types") or () if t != "full"]
    if shared or f.int("index_topk_freq", 1) > 1 or "S" in str(f.cfg.get("index_topk_pattern") or ""):
        raise f._fail("layers that share another layer's top-k indexer ('indexer_types' 'shared') are not "
                      "supported yet; use a config whose every layer runs its indexer")
    kw.update(
        index_topk=f.int("index_topk"),
        index_n_heads=f.int("index_n_heads"),
        index_head_dim=f.int("index_head_dim"),
    )
    if kw.get("sliding_window"):
        raise f._fail("a model cannot have both a sliding window and DeepSeek sparse attention (index_topk)")


def _running(f: _Fields, family: Family, kw: dict[str, Any]) -> None:
    """Fields only running the model needs (rope scaling, routing details, token ids); the counts ignore them."""
    cfg = f.cfg
    kw["rope_scaling"] = _rope_scaling(f, kw["max_position_embeddings"])
    if family in ("qwen3_moe", "deepseek_v3"):  # Mixtral always renormalises, GPT-OSS softmaxes the top k
        kw["norm_topk_prob"] = f.bool("norm_topk_prob", family != "qwen3_moe")
    if family == "deepseek_v3":
        kw["routed_scaling_factor"] = f.float("routed_scaling_factor", 1.0)
        kw["rope_interleave"] = f.bool("rope_interleave", True)
    eos = cfg.get("eos_token_id")
    eos = [] if eos is None else eos if isinstance(eos, (list, tuple)) else [eos]
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in eos):
        raise f._fail(f"field 'eos_token_id' must be a token id or a list of them, got {cfg.get('eos_token_id')!r}")
    kw["eos_token_ids"] = tuple(eos)
    if f.has("bos_token_id"):
        kw["bos_token_id"] = f.int("bos_token_id", min_value=0)


def _rope_scaling(f: _Fields, max_positions: int) -> RopeScaling:
    """``rope_scaling`` and ``rope_parameters`` (transformers 5) merged, the latter winning; ``type`` is the old
    spelling of ``rope_type``."""
    merged: dict[str, Any] = {}
    for key in ("rope_scaling", "rope_parameters"):
        val = f.cfg.get(key)
        if val is not None and not isinstance(val, Mapping):
            raise f._fail(f"field {key!r} must be an object, got {val!r}")
        merged.update(val or {})
    kind = str(merged.get("rope_type") or merged.get("type") or "default")
    if kind == "default":
        return RopeScaling()
    r = _Fields(merged, f.where, f.model_type)

    def opt(key: str) -> float | None:
        return r.float(key, 0.0) if r.has(key) else None

    return RopeScaling(
        rope_type=kind,
        factor=opt("factor"),
        original_max_position_embeddings=r.int("original_max_position_embeddings", max_positions),
        low_freq_factor=opt("low_freq_factor"),
        high_freq_factor=opt("high_freq_factor"),
        beta_fast=opt("beta_fast"),
        beta_slow=opt("beta_slow"),
        mscale=opt("mscale"),
        mscale_all_dim=opt("mscale_all_dim"),
        attention_factor=opt("attention_factor"),
        truncate=r.bool("truncate", True),
    )


def _rope_theta(cfg: Mapping[str, Any]) -> float:
    if cfg.get("rope_theta") is not None:
        return float(cfg["rope_theta"])
    params = cfg.get("rope_parameters")
    if isinstance(params, Mapping) and params.get("rope_theta") is not None:
        return float(params["rope_theta"])
    return 10000.0


def _mla(f: _Fields, kw: dict[str, Any]) -> None:
    nope = f.int("qk_nope_head_dim")
    rope = f.int("qk_rope_head_dim")
    kw.update(
        attention="mla",
        q_lora_rank=f.int("q_lora_rank") if f.has("q_lora_rank") else None,
        kv_lora_rank=f.int("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=f.int("v_head_dim"),
        head_dim=nope + rope,  # query/key head width; the cache holds the latent instead
        intermediate_size=f.int("intermediate_size"),
    )


def _moe(f: _Fields, family: Family, kw: dict[str, Any]) -> None:
    cfg, layers = f.cfg, kw["num_layers"]
    if family == "mixtral":
        kw.update(
            num_experts=f.int("num_local_experts"),
            experts_per_token=f.int("num_experts_per_tok"),
            moe_intermediate_size=kw["intermediate_size"],
            router="softmax_topk",
        )
    elif family == "gpt_oss":
        kw.update(
            num_experts=f.int("num_local_experts"),
            experts_per_token=f.first_int("num_experts_per_tok", "experts_per_token"),
            moe_intermediate_size=kw["intermediate_size"],
            router="softmax_topk",
        )
    elif family == "qwen3_moe":
        step = f.int("decoder_sparse_step", 1)
        mlp_only = set(cfg.get("mlp_only_layers") or ())
        n_exp = f.first_int("num_experts", "num_local_experts")
        kw.update(
            num_experts=n_exp,
            experts_per_token=f.int("num_experts_per_tok"),
            moe_intermediate_size=f.int("moe_intermediate_size"),
            router="softmax_topk",
            moe_layers=tuple(i not in mlp_only and (i + 1) % step == 0 for i in range(layers)),
        )
    elif family == "minimax_m2":
        kw.update(
            num_experts=f.int("num_local_experts"),
            experts_per_token=f.int("num_experts_per_tok"),
            moe_intermediate_size=kw["intermediate_size"],
            num_shared_experts=1 if f.int("shared_intermediate_size", 0, min_value=0) else 0,
            shared_expert_intermediate_size=f.int("shared_intermediate_size", 0, min_value=0),
            router="sigmoid_group_topk" if cfg.get("scoring_func", "sigmoid") == "sigmoid" else "softmax_topk",
        )
    elif family == "qwen3_5_moe":
        step = f.int("decoder_sparse_step", 1)
        mlp_only = set(cfg.get("mlp_only_layers") or ())
        shared = f.int("shared_expert_intermediate_size", 0, min_value=0)
        kw.update(
            num_experts=f.first_int("num_experts", "num_local_experts"),
            experts_per_token=f.int("num_experts_per_tok"),
            moe_intermediate_size=f.int("moe_intermediate_size"),
            num_shared_experts=1 if shared else 0,
            shared_expert_intermediate_size=shared,
            shared_expert_gate=bool(shared),
            router="softmax_topk",
            moe_layers=tuple(i not in mlp_only and (i + 1) % step == 0 for i in range(layers)),
        )
    elif family in ("deepseek_v3", "glm_moe_dsa"):
        scoring = cfg.get("scoring_func", "sigmoid")
        first_dense = f.int("first_k_dense_replace", 0, min_value=0)
        freq = f.int("moe_layer_freq", 1)
        kw.update(
            num_experts=f.int("n_routed_experts"),
            experts_per_token=f.int("num_experts_per_tok"),
            moe_intermediate_size=f.int("moe_intermediate_size"),
            num_shared_experts=f.int("n_shared_experts", 0, min_value=0),
            first_dense_layers=first_dense,
            moe_layer_freq=freq,
            router="sigmoid_group_topk" if scoring == "sigmoid" else "softmax_topk",
            n_group=f.int("n_group", 1),
            topk_group=f.int("topk_group", 1),
            moe_layers=tuple(i >= first_dense and i % freq == 0 for i in range(layers)),
        )
    else:
        return
    if kw["experts_per_token"] > kw["num_experts"]:
        raise f._fail(f"num_experts_per_tok ({kw['experts_per_token']}) exceeds the expert count ({kw['num_experts']})")


def _sliding(f: _Fields, family: Family, layers: int, kw: dict[str, Any]) -> None:
    cfg = f.cfg
    raw = cfg.get("layer_types")
    if raw is not None:
        if not isinstance(raw, (list, tuple)) or len(raw) != layers:
            raise f._fail(f"'layer_types' must list one entry per layer ({layers})")
        unknown = sorted({t for t in raw if t not in _LAYER_TYPES})
        if unknown:
            raise f._fail(f"unsupported layer_types {unknown}; supported: {', '.join(_LAYER_TYPES)}")
        types = tuple(_LAYER_TYPES[t] for t in raw)
    elif family == "gpt_oss":  # transformers' default: even layers sliding, odd layers full
        types = tuple("sliding" if i % 2 == 0 else "full" for i in range(layers))
    elif family in ("qwen2", "qwen3", "qwen3_moe") and f.bool("use_sliding_window", False):
        first = f.int("max_window_layers", layers, min_value=0)
        types = tuple("sliding" if i >= first else "full" for i in range(layers))
    elif family == "qwen3_5_moe" and f.has("full_attention_interval"):  # every n-th layer is full attention
        n = f.int("full_attention_interval")
        types = tuple("full" if (i + 1) % n == 0 else "linear" for i in range(layers))
    elif (family == "mixtral" or f.model_type == "mistral") and f.has("sliding_window"):
        types = ("sliding",) * layers
    else:
        types = ("full",) * layers
    kw["layer_types"] = types
    if "sliding" in types:
        kw["sliding_window"] = f.int("sliding_window", 128 if family == "gpt_oss" else None)


def _quant(f: _Fields, kw: dict[str, Any], extra: dict[str, Any]) -> None:
    cfg = f.cfg
    dtype = _TORCH_DTYPES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"), "bf16")
    kw["native_weight_dtype"], kw["native_quant_scope"] = dtype, "none"
    q = cfg.get("quantization_config")
    if not isinstance(q, Mapping):
        return
    method = str(q.get("quant_method", "")).lower()
    extra["quantization"] = method
    if method == "fp8":
        block = q.get("weight_block_size")
        kw["native_weight_dtype"] = "fp8" if block else "fp8_per_tensor"
        kw["native_quant_scope"] = "all"
        if block and list(block) != [128, 128]:  # BYTES_PER_ELEMENT["fp8"] assumes 128x128 blocks
            kw["native_bytes_per_element"] = 1.0 + 4.0 / (int(block[0]) * int(block[1]))
    elif method == "mxfp4":
        kw["native_weight_dtype"], kw["native_quant_scope"] = "mxfp4", "experts"
    elif method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        weights = next((g.get("weights") for g in groups.values() if isinstance(g, Mapping)), None) or {}
        bits, typ = weights.get("num_bits"), weights.get("type")
        if bits in (4, 8) and typ == "int":
            kw["native_weight_dtype"] = "int4" if bits == 4 else "int8"
            ignore = " ".join(str(x) for x in q.get("ignore") or ())
            kw["native_quant_scope"] = "experts" if "self_attn" in ignore else "all"
            group = weights.get("group_size")
            if isinstance(group, int) and group > 0:  # one bf16 scale per group (symmetric: no zero point)
                kw["native_bytes_per_element"] = bits / 8 + 2.0 / group
        else:
            extra["quantization_unrecognized"] = True
    else:
        extra["quantization_unrecognized"] = True
