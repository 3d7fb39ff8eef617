"""Model configuration for the PyTorch backend, read from a Hugging Face ``config.json`` dict.

One flat dataclass covers every supported family; fields a family does not use keep their defaults. Names
follow the HF config keys so a reader can check them against ``config.json`` directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jalapeno.errors import ConfigError

#: HF ``model_type`` -> module in :mod:`jalapeno.backends.torch.models` that implements it
FAMILIES: dict[str, str] = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "llama",
    "qwen3": "llama",
    "mixtral": "moe",
    "qwen3_moe": "moe",
    "gpt_oss": "gpt_oss",
    "deepseek_v3": "deepseek",
    "kimi_k2": "deepseek",
}


@dataclass
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"
    #: rope: ``rope_type`` in {"default", "llama3", "yarn", "linear"} plus its parameters (HF names)
    rope: dict[str, Any] = field(default_factory=dict)
    attention_bias: bool = False  # q/k/v biases (Qwen2: True); o_proj bias only for GPT-OSS
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k before rope
    # --- MoE -------------------------------------------------------------------------------------------
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    # --- GPT-OSS ---------------------------------------------------------------------------------------
    layer_types: tuple[str, ...] = ()  # "sliding_attention" | "full_attention" per layer
    sliding_window: int | None = None
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0
    # --- DeepSeek-V3 / Kimi K2 (MLA) -------------------------------------------------------------------
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    n_shared_experts: int = 0
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    first_k_dense_replace: int = 0
    rope_interleave: bool = True
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None

    @property
    def family(self) -> str:
        return FAMILIES[self.model_type]

    @property
    def is_mla(self) -> bool:
        return self.family == "deepseek"

    @property
    def kv_cache_heads(self) -> int:
        """Heads stored per token in the KV cache (1 latent head for MLA)."""
        return 1 if self.is_mla else self.num_key_value_heads

    @property
    def kv_cache_head_dim(self) -> int:
        """Values stored per head per token: head_dim, or kv_lora_rank + rope dims for MLA's latent cache."""
        return self.kv_lora_rank + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def kv_cache_tensors(self) -> int:
        """Cache tensors per layer: K and V, or one latent tensor for MLA."""
        return 1 if self.is_mla else 2

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return self.num_hidden_layers * self.kv_cache_tensors * self.kv_cache_heads * self.kv_cache_head_dim * dtype_bytes

    @staticmethod
    def from_hf(cfg: dict[str, Any]) -> "ModelConfig":
        """Build from a ``config.json`` dict; raises :class:`ConfigError` for unsupported or broken configs."""
        mt = cfg.get("model_type")
        if mt not in FAMILIES:
            raise ConfigError(
                f"model_type {mt!r} is not supported by the torch backend; supported: {', '.join(sorted(FAMILIES))}"
            )
        try:
            hidden = int(cfg["hidden_size"])
            heads = int(cfg["num_attention_heads"])
            head_dim = cfg.get("head_dim") or hidden // heads
            eos = cfg.get("eos_token_id")
            eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
            c = ModelConfig(
                model_type=mt,
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=hidden,
                num_hidden_layers=int(cfg["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(head_dim),
                intermediate_size=int(cfg.get("intermediate_size") or 0),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                hidden_act=cfg.get("hidden_act", "silu"),
                rope=_rope_params(cfg),
                attention_bias=bool(cfg.get("attention_bias", mt == "qwen2")),
                qk_norm=mt in ("qwen3", "qwen3_moe"),
                num_experts=int(cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0),
                num_experts_per_tok=int(cfg.get("num_experts_per_tok") or 0),
                moe_intermediate_size=int(cfg.get("moe_intermediate_size") or 0),
                norm_topk_prob=bool(cfg.get("norm_topk_prob", mt != "qwen3_moe")),
                decoder_sparse_step=int(cfg.get("decoder_sparse_step") or 1),
                mlp_only_layers=tuple(cfg.get("mlp_only_layers") or ()),
                layer_types=tuple(cfg.get("layer_types") or ()),
                sliding_window=cfg.get("sliding_window") if mt == "gpt_oss" else None,
                swiglu_alpha=float(cfg.get("swiglu_alpha", 1.702)),
                swiglu_limit=float(cfg.get("swiglu_limit", 7.0)),
                q_lora_rank=cfg.get("q_lora_rank"),
                kv_lora_rank=int(cfg.get("kv_lora_rank") or 0),
                qk_nope_head_dim=int(cfg.get("qk_nope_head_dim") or 0),
                qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0),
                v_head_dim=int(cfg.get("v_head_dim") or 0),
                n_shared_experts=int(cfg.get("n_shared_experts") or 0),
                n_group=int(cfg.get("n_group") or 1),
                topk_group=int(cfg.get("topk_group") or 1),
                routed_scaling_factor=float(cfg.get("routed_scaling_factor", 1.0)),
                first_k_dense_replace=int(cfg.get("first_k_dense_replace") or 0),
                rope_interleave=bool(cfg.get("rope_interleave", True)),
                eos_token_ids=eos_ids,
                bos_token_id=cfg.get("bos_token_id"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"model config is missing or has a bad value for {exc}; check config.json") from None
        if c.num_attention_heads % c.num_key_value_heads:
            raise ConfigError("num_attention_heads must be a multiple of num_key_value_heads in config.json")
        if c.family == "gpt_oss" and not c.layer_types:
            c.layer_types = tuple(
                "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(c.num_hidden_layers)
            )
        return c

    def layer_window(self, layer: int) -> int | None:
        """Sliding-window size for ``layer`` (keys with ``q_pos - k_pos < window`` are visible), else None."""
        if self.layer_types and self.layer_types[layer] == "sliding_attention":
            return self.sliding_window
        return None


def _rope_params(cfg: dict[str, Any]) -> dict[str, Any]:
    """Normalise the two HF spellings (``rope_parameters`` in v5, ``rope_theta`` + ``rope_scaling`` before)."""
    rp = dict(cfg.get("rope_parameters") or {})
    scaling = cfg.get("rope_scaling") or {}
    rp = {**scaling, **rp}
    rp.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    rp["rope_type"] = rp.get("rope_type") or rp.get("type") or "default"
    if rp["rope_type"] in ("llama3", "yarn"):
        rp.setdefault("original_max_position_embeddings", cfg.get("max_position_embeddings", 4096))
    return rp
