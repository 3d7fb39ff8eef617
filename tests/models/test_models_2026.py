"""The 2026 models users deploy (MiniMax-M2.5, Qwen3.5-397B-A17B, GLM-5, Qwen3-32B): what the parser reads from
their configs, their active counts against the published figures, and KV / state bytes counted by hand.

Exact total counts against transformers' module trees are in test_models_transformers.py."""

from __future__ import annotations

import json

import pytest

from jalapeno.errors import ConfigError
from jalapeno.models import arch_from_config, load_model
from jalapeno.models.catalog import _entries

B = 1e9


def rel(a: float, b: float) -> float:
    return abs(a - b) / b


def test_qwen35_hybrid_layer_pattern_and_linear_attention_fields():
    a = load_model("Qwen/Qwen3.5-397B-A17B")
    assert a.family == "qwen3_5_moe" and a.extra["multimodal"]
    assert a.layer_types == ("linear", "linear", "linear", "full") * 15  # full_attention_interval 4
    assert a.num_linear_layers == 45
    assert (a.linear_num_key_heads, a.linear_num_value_heads) == (16, 64)
    assert (a.linear_key_head_dim, a.linear_value_head_dim, a.linear_conv_kernel) == (128, 128, 4)
    assert a.linear_state_dtype == "fp32"  # mamba_ssm_dtype float32
    assert a.attn_output_gate and a.qk_norm and not a.qk_norm_per_layer
    assert (a.num_experts, a.experts_per_token, a.num_shared_experts) == (512, 10, 1)
    assert a.shared_expert_intermediate_size == 1024 and a.shared_expert_gate
    assert a.mtp_layers == 1 and a.attention_window is None


def test_qwen35_active_is_a17b_truncated():
    # Qwen counts the embedding and truncates (Qwen3-30B-A3B: 3.353B -> "3.3B"): 17.35B -> "A17B"
    a = load_model("qwen3.5-397b-a17b")
    assert 17 * B <= a.active_params(include_embedding=True) < 17.5 * B


def test_qwen35_kv_and_state_bytes_by_hand():
    a = load_model("qwen3.5-397b-a17b")
    kv_layer = 2 * 2 * 256 * 2  # K and V, 2 kv heads, head_dim 256, bf16
    assert a.kv_bytes_per_token("bf16") == 15 * kv_layer  # only the 15 full-attention layers
    assert a.kv_bytes(10_000, "fp8") == 15 * 10_000 * kv_layer / 2
    ssm = 64 * 128 * 128 * 4  # v heads x dk x dv, fp32
    conv = 3 * (2 * 16 * 128 + 64 * 128) * 2  # (kernel - 1) x (q + k + v channels), bf16
    assert a.linear_state_bytes() == ssm + conv == 4_268_032
    assert a.state_bytes_per_sequence() == 45 * 4_268_032  # constant in the context length


def test_glm5_sparse_attention_mla_moe_mtp():
    a = load_model("zai-org/GLM-5")
    assert a.family == "glm_moe_dsa" and a.attention == "mla"
    assert (a.index_topk, a.index_n_heads, a.index_head_dim) == (2048, 32, 128)
    assert a.attention_window == 2048
    assert (a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim) == \
        (2048, 512, 192, 64, 256)
    assert (a.num_experts, a.experts_per_token, a.num_shared_experts, a.first_dense_layers) == (256, 8, 1, 3)
    assert a.num_moe_layers == 75 and a.mtp_layers == 1  # technical report: 3 dense + 75 MoE, 1 MTP layer


def test_glm5_active_vs_published_40b():
    # GLM-5 report: "40B activated". DeepSeek's convention (head counted, embedding not) gives 40.8B; without
    # the 0.95B head too, 39.9B: the published figure sits between the two
    a = load_model("glm-5")
    head = 154880 * 6144
    assert rel(a.active_params(), 40 * B) < 0.025
    assert rel(a.active_params() - head, 40 * B) < 0.005


def test_glm5_kv_bytes_latent_plus_indexer_by_hand():
    a = load_model("glm-5")
    per_layer = (512 + 64) * 2 + (128 + 4)  # bf16 latent + rope key; fp8 indexer key + fp32 scale
    assert a.kv_bytes_per_token("bf16") == 78 * per_layer
    assert a.kv_bytes(4096, "bf16") == 78 * 4096 * per_layer  # DSA keeps every token, reads only top-k
    assert a.state_bytes_per_sequence() == 0


def test_glm5_fp8_checkpoint_weights():
    a, b = load_model("glm-5-fp8"), load_model("glm-5")
    assert a.total_params() == b.total_params()
    assert a.native_weight_dtype == "fp8" and a.native_quant_scope == "all"
    assert a.weight_bytes() < 0.51 * b.weight_bytes()


def test_minimax_m25_fields_and_active_9_8b():
    a = load_model("MiniMaxAI/MiniMax-M2.5")
    assert a.family == "minimax_m2" and a.attention == "gqa" and a.layer_types == ("full",) * 62
    assert a.qk_norm and a.qk_norm_per_layer  # q_norm over all 48 heads, k_norm over all 8
    assert (a.num_experts, a.experts_per_token, a.num_shared_experts) == (256, 8, 0)
    assert a.router == "sigmoid_group_topk" and a.mtp_layers == 3  # 3 MTP modules of 1 layer
    assert a.native_weight_dtype == "fp8"
    # MiniMax's "9.8B activated" excludes the embedding AND the LM head (200064 x 3072 each)
    head = 200064 * 3072
    assert rel(a.active_params() - head, 9.8 * B) < 0.005
    assert a.kv_bytes_per_token("bf16") == 62 * 2 * 8 * 128 * 2


def test_qwen3_32b_dense():
    a = load_model("Qwen/Qwen3-32B")
    assert a.family == "qwen3" and a.num_experts == 0 and a.layer_types == ("full",) * 64
    assert a.kv_bytes_per_token("bf16") == 64 * 2 * 8 * 128 * 2


def test_full_attention_interval_without_layer_types():
    raw = json.loads(_entries()["qwen3.5-397b-a17b"][1])["config"]["text_config"]
    cfg = {k: v for k, v in raw.items() if k != "layer_types"}
    a = arch_from_config(cfg)
    assert a.layer_types == load_model("qwen3.5-397b-a17b").layer_types


def test_linear_heads_must_divide():
    raw = json.loads(_entries()["qwen3.5-397b-a17b"][1])["config"]["text_config"]
    with pytest.raises(ConfigError, match="linear_num_value_heads"):
        arch_from_config(dict(raw, linear_num_value_heads=24, linear_num_key_heads=16))


def test_dsa_without_mla_is_refused():
    raw = json.loads(_entries()["qwen3-32b"][1])["config"]
    with pytest.raises(ConfigError, match="index_topk"):
        arch_from_config(dict(raw, index_topk=2048, index_n_heads=8, index_head_dim=64))


def test_models_show_json_reports_state_and_indexer(capsys):
    from jalapeno.cli import main

    with pytest.raises(SystemExit) as e:
        main(["models", "show", "qwen3.5-397b-a17b", "--json"])
        raise SystemExit(0)
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    rec = json.loads(out.out)
    assert rec["linear_attention_layers"] == 45 and rec["kv_layers"] == 15
    assert rec["state_bytes_per_sequence"] == 45 * 4_268_032
    assert "aiconfigurator-core/0.12.0" in rec["provenance"]["sources"][0]
    assert rec["arch"]["layer_types"][:4] == ["linear", "linear", "linear", "full"]


@pytest.mark.parametrize("name", ["minimax-m2.5", "qwen3.5-397b-a17b", "glm-5"])
def test_torch_engine_refuses_the_new_families(name):
    pytest.importorskip("torch")
    from jalapeno.backends.torch.models import torch_arch

    raw = json.loads(_entries()[name][1])["config"]
    with pytest.raises(ConfigError, match="torch backend"):  # no module for the family, or a multimodal wrapper
        torch_arch(raw)
