"""Parameter, KV and weight-byte counts of the shipped models against published figures and hand arithmetic.

The published figures below (model cards / papers, rounded as published) are the independent reference.
"""

from __future__ import annotations

import pytest

from jalapeno.errors import UnknownNameError
from jalapeno.models import list_models, load_model

B = 1e9

# name -> published total parameters (main model, MTP excluded)
PUBLISHED_TOTAL = {
    "gpt-oss-120b": 116.8 * B,
    "gpt-oss-20b": 20.9 * B,
    "deepseek-v3": 671 * B,
    "deepseek-r1": 671 * B,
    "kimi-k2": 1.03e12,
    "kimi-k2.5": 1.03e12,  # text backbone = Kimi K2 (vision tower not counted)
    "llama-3.1-8b": 8.03 * B,
    "llama-3.1-70b": 70.6 * B,
    "llama-3.3-70b": 70.6 * B,
    "llama-3.1-405b": 405.9 * B,
    "qwen3-235b-a22b": 235 * B,
    "qwen3-30b-a3b": 30.5 * B,
    "mixtral-8x7b": 46.7 * B,
    "smollm2-135m": 134.5e6,
    # 2026 models (configs from the aiconfigurator-core wheel). MiniMax: "229B" (a third-party paper: 229.9B);
    # Qwen3.5: "397B" counts the vision tower (~0.45B) we do not; GLM-5: "744B" (technical report)
    "minimax-m2.5": 229 * B,
    "qwen3.5-397b-a17b": 397 * B,
    "glm-5": 744 * B,
    "glm-5-fp8": 744 * B,
    "qwen3-32b": 32.8 * B,
}

# name -> (published active parameters, whether the publisher counts the input embedding table)
# OpenAI and DeepSeek count the LM head but not the embedding lookup; Qwen and Mistral count both.
PUBLISHED_ACTIVE = {
    "gpt-oss-120b": (5.1 * B, False),
    "gpt-oss-20b": (3.6 * B, False),
    "deepseek-v3": (36.6 * B, False),  # "37B"; DeepSeek's breakdown: 36.6B incl. the 0.9B head
    "deepseek-r1": (36.6 * B, False),
    "kimi-k2": (32 * B, False),
    "kimi-k2.5": (32 * B, False),
    "qwen3-235b-a22b": (22 * B, True),
    "mixtral-8x7b": (12.9 * B, True),
    "qwen3-32b": (32.8 * B, True),
}


def rel(a: float, b: float) -> float:
    return abs(a - b) / b


def test_every_shipped_model_has_a_published_total():
    assert set(list_models()) == set(PUBLISHED_TOTAL)


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTAL))
def test_total_params_match_published(name):
    assert rel(load_model(name).total_params(), PUBLISHED_TOTAL[name]) < 0.01


@pytest.mark.parametrize("name", sorted(PUBLISHED_ACTIVE))
def test_active_params_match_published(name):
    published, with_embedding = PUBLISHED_ACTIVE[name]
    assert rel(load_model(name).active_params(include_embedding=with_embedding), published) < 0.01


def test_qwen3_30b_active_within_two_percent():
    # Qwen publishes "3.3B activated"; counting every tensor (embedding + head + 8 of 128 experts) gives
    # 3.353B, i.e. the published figure is truncated rather than rounded (235B-A22B: 22.19B -> "22B").
    a = load_model("qwen3-30b-a3b")
    assert rel(a.active_params(include_embedding=True), 3.3 * B) < 0.02
    assert a.active_params(include_embedding=True) > 3.3 * B


def test_deepseek_active_vs_rounded_37b_and_mtp():
    a = load_model("deepseek-r1")
    assert rel(a.active_params(), 37 * B) < 0.015  # "37B" is 36.6B rounded up
    # the 0.9B LM head is part of the active count, the embedding (same size) is not
    assert rel(a.active_params(include_embedding=True) - a.active_params(), 0.93 * B) < 0.01
    assert rel(a.mtp_params(), 11.5 * B) < 0.01
    assert a.mtp_layers == 1


def test_dense_active_is_total_with_embedding():
    a = load_model("llama-3.1-8b")
    assert a.active_params(include_embedding=True) == a.total_params()
    assert a.total_params() - a.active_params() == 128256 * 4096  # the embedding table
    tied = load_model("smollm2-135m")
    assert tied.active_params() == tied.total_params()  # tied: the table is the head, counted once


def test_mtp_is_zero_without_nextn_layers():
    assert load_model("kimi-k2").mtp_params() == 0
    assert load_model("llama-3.1-8b").mtp_params() == 0


def test_kimi_k25_text_backbone_equals_kimi_k2():
    k2, k25 = load_model("kimi-k2"), load_model("kimi-k2.5")
    assert k25.total_params() == k2.total_params()
    assert k25.family == "deepseek_v3" and k25.model_type == "kimi_k25"
    assert k25.max_position_embeddings == 262144 and k25.extra["multimodal"]


# ----------------------------------------------------------------------------------------------- KV
def test_kv_bytes_gqa_llama_8b():
    a = load_model("llama-3.1-8b")
    assert a.kv_bytes_per_token("bf16") == 32 * 2 * 8 * 128 * 2 == 131072
    assert a.kv_bytes_per_token("fp8") == 32 * 2 * 8 * 128 * 1
    assert a.kv_bytes(1000, "bf16") == 1000 * 131072


def test_kv_bytes_mla_deepseek_r1():
    a = load_model("deepseek-r1")
    assert a.kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2
    assert a.kv_bytes_per_token("bf16", context_len=4096) == 61 * (512 + 64) * 2  # no sliding layers


def test_kv_bytes_sliding_gpt_oss_120b():
    a = load_model("gpt-oss-120b")
    per_layer_token = 2 * 8 * 64 * 2  # K and V, 8 kv heads, head_dim 64, bf16
    assert a.kv_bytes_per_token("bf16") == 36 * per_layer_token  # uncapped marginal cost
    total = 18 * 8192 * per_layer_token + 18 * 128 * per_layer_token  # 18 full + 18 sliding (window 128)
    assert a.kv_bytes(8192, "bf16") == total
    assert a.kv_bytes_per_token("bf16", context_len=8192) == pytest.approx(total / 8192)
    # below the window every layer still holds every token
    assert a.kv_bytes_per_token("bf16", context_len=100) == 36 * per_layer_token


def test_kv_dtype_unknown():
    with pytest.raises(UnknownNameError, match="fp4"):
        load_model("llama-3.1-8b").kv_bytes_per_token("fp4")


# ----------------------------------------------------------------------------------------------- bytes
def test_weight_bytes_gpt_oss_20b_native_mxfp4_hand_computed():
    a = load_model("gpt-oss-20b")
    h, inter, experts, layers = 2880, 2880, 32, 24
    expert_weights = layers * experts * (h * 2 * inter + inter * h)  # gate_up + down, biases stay bf16
    mxfp4 = 0.5 + 1 / 32  # e2m1 nibbles + one e8m0 scale byte per 32
    expected = expert_weights * mxfp4 + (20_914_757_184 - expert_weights) * 2
    assert a.total_params() == 20_914_757_184  # transformers' count (see test_models_transformers.py)
    assert a.weight_bytes() == pytest.approx(expected)
    assert a.weight_bytes("mxfp4") == a.weight_bytes()  # the native dtype keeps the native scope
    assert a.weight_bytes("bf16") == 2 * a.total_params()


def test_weight_bytes_deepseek_fp8_all_linear():
    a = load_model("deepseek-r1")
    vocab, h, layers = 129280, 7168, 61
    unquantized = 2 * vocab * h + h + 2 * h * layers  # embed, head, final norm, layer norms
    unquantized += layers * (1536 + 512)  # q_a / kv_a latent norms
    unquantized += 58 * 256 * h  # routers
    fp8 = 1 + 4 / (128 * 128)
    expected = (a.total_params() - unquantized) * fp8 + unquantized * 2
    assert a.native_weight_dtype == "fp8" and a.native_quant_scope == "all"
    assert a.weight_bytes() == pytest.approx(expected)


def test_weight_bytes_kimi_k25_int4_group32():
    # compressed-tensors int4, symmetric, group 32 with a bf16 scale: 0.5 + 2/32 bytes per element; only
    # routed experts are quantized (attention, shared experts and head are in the config's "ignore" list).
    a = load_model("kimi-k2.5")
    assert a.native_weight_dtype == "int4" and a.native_quant_scope == "experts"
    routed = 60 * 384 * 3 * 7168 * 2048  # 60 MoE layers (first_k_dense_replace=1)
    expected = routed * (0.5 + 2 / 32) + (a.total_params() - routed) * 2
    assert a.weight_bytes() == pytest.approx(expected)
    # ~553 GiB; third parties quote ~555 GB for the same-format K2.6 checkpoint
    assert rel(a.weight_bytes() / 2**30, 555) < 0.01


def test_weight_bytes_unknown_dtype():
    with pytest.raises(UnknownNameError, match="nf4"):
        load_model("llama-3.1-8b").weight_bytes("nf4")


def test_active_weight_bytes_bf16_dense():
    a = load_model("llama-3.1-8b")
    assert a.active_weight_bytes("bf16") == 2 * a.active_params()
