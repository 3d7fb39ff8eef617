"""Exact parameter counts against Hugging Face transformers' module trees (built on the meta device)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from jalapeno.models import arch_from_config, list_models  # noqa: E402
from jalapeno.models.catalog import _entries  # noqa: E402

TINY = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2)


def hf_count(cfg) -> int:
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())  # tied weights are yielded once


def tiny_configs():
    t = transformers
    mla = dict(TINY, num_key_value_heads=4, moe_intermediate_size=24, first_k_dense_replace=1, n_routed_experts=8,
               n_group=2, topk_group=1, num_experts_per_tok=2, kv_lora_rank=8, qk_rope_head_dim=4,
               qk_nope_head_dim=8, v_head_dim=8)
    gdn = dict(TINY, head_dim=16, moe_intermediate_size=24, num_experts=6, num_experts_per_tok=2,
               shared_expert_intermediate_size=20, linear_num_key_heads=2, linear_num_value_heads=4,
               linear_key_head_dim=8, linear_value_head_dim=6, linear_conv_kernel_dim=3)
    return {
        "llama": t.LlamaConfig(**TINY),
        "llama-biases-tied": t.LlamaConfig(**TINY, attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
        "qwen2": t.Qwen2Config(**TINY),
        "qwen3": t.Qwen3Config(**TINY, head_dim=16),
        "qwen3_moe": t.Qwen3MoeConfig(**TINY, moe_intermediate_size=24, num_local_experts=6, num_experts_per_tok=2),
        "qwen3_moe-mlp-only": t.Qwen3MoeConfig(**TINY, moe_intermediate_size=24, num_local_experts=6,
                                               num_experts_per_tok=2, mlp_only_layers=[1]),
        "qwen3_moe-sparse-step": t.Qwen3MoeConfig(**TINY, moe_intermediate_size=24, num_local_experts=6,
                                                  num_experts_per_tok=2, decoder_sparse_step=2),
        "mixtral": t.MixtralConfig(**TINY, num_local_experts=4, num_experts_per_tok=2),
        "gpt_oss": t.GptOssConfig(**TINY, head_dim=16, num_local_experts=4, num_experts_per_tok=2),
        "deepseek_v3": t.DeepseekV3Config(**mla, n_shared_experts=2, q_lora_rank=16),
        "deepseek_v3-no-q-lora-bias": t.DeepseekV3Config(**mla, n_shared_experts=1, q_lora_rank=None,
                                                         attention_bias=True),
        # 2026 families: per-layer q/k norms; hybrid Gated DeltaNet + gated attention; MLA + DSA indexer
        "minimax_m2": t.MiniMaxM2Config(**dict(TINY, intermediate_size=24), head_dim=16, num_local_experts=6,
                                        num_experts_per_tok=2, use_qk_norm=True, qk_norm_type="per_layer"),
        "qwen3_5_moe": t.Qwen3_5MoeTextConfig(**gdn, layer_types=["linear_attention"] * 3 + ["full_attention"]),
        "qwen3_next": t.Qwen3NextConfig(**gdn, full_attention_interval=2),
        "glm_moe_dsa": t.GlmMoeDsaConfig(**mla, n_shared_experts=1, q_lora_rank=16, index_topk=4, index_n_heads=2,
                                         index_head_dim=8),
    }


@pytest.mark.parametrize("case", sorted(tiny_configs()))
def test_tiny_config_total_params_exact(case):
    cfg = tiny_configs()[case]
    arch = arch_from_config(cfg.to_dict())
    assert arch.total_params() == hf_count(cfg)


def test_all_six_families_covered():
    families = {arch_from_config(c.to_dict()).family for c in tiny_configs().values()}
    assert families >= {"llama", "qwen3", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "minimax_m2",
                        "qwen3_5_moe", "glm_moe_dsa"}


@pytest.mark.parametrize("name", list_models())
def test_shipped_config_total_params_exact(name):
    """The full-size catalogue configs, instantiated by transformers on the meta device (no memory)."""
    raw = json.loads(_entries()[name][1])["config"]
    raw = raw.get("text_config", raw)  # Kimi K2.5: the language model
    skip = ("quantization_config", "auto_map", "architectures", "model_type")
    kwargs = {k: v for k, v in raw.items() if k not in skip}
    model_type = raw["model_type"]
    if model_type == "kimi_k2":  # remote-code model = DeepSeek-V3 architecture
        cfg = transformers.DeepseekV3Config(**kwargs)
    else:
        cfg = transformers.AutoConfig.for_model(model_type, **kwargs)
    from jalapeno.models import load_model

    assert load_model(name).total_params() == hf_count(cfg)
