"""ModelArch fields that only running a model needs (the torch backend builds its modules from them): RoPE
scaling, routing details, the clamped SwiGLU limit, token ids. Reference: transformers' own config classes
built from each shipped config.json (they normalise ``rope_scaling``/``type`` into ``rope_parameters``)."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

transformers = pytest.importorskip("transformers")

from jalapeno.errors import ConfigError  # noqa: E402
from jalapeno.models import arch_from_config, list_models, load_model  # noqa: E402
from jalapeno.models.arch import RopeScaling  # noqa: E402
from jalapeno.models.catalog import _entries  # noqa: E402

ROPE_NUMBERS = [f.name for f in fields(RopeScaling) if f.name not in ("rope_type", "truncate")]


def _hf_config(name: str):
    raw = json.loads(_entries()[name][1])["config"]
    raw = raw.get("text_config", raw)  # Kimi K2.5: the language model
    skip = ("quantization_config", "auto_map", "architectures", "model_type")
    kwargs = {k: v for k, v in raw.items() if k not in skip}
    if raw["model_type"] == "kimi_k2":  # remote-code model = DeepSeek-V3 architecture
        return transformers.DeepseekV3Config(**kwargs)
    return transformers.AutoConfig.for_model(raw["model_type"], **kwargs)


@pytest.mark.parametrize("name", list_models())
def test_running_fields_match_transformers_config(name):
    arch, hf = load_model(name), _hf_config(name)
    rp = dict(hf.rope_parameters)
    rs = arch.rope_scaling
    assert rs.rope_type == rp["rope_type"]
    assert arch.rope_theta == rp["rope_theta"]
    if rs.rope_type == "default":
        assert rs == RopeScaling()
    for key in ROPE_NUMBERS:
        if rp.get(key) is not None:
            assert getattr(rs, key) == rp[key], key
    assert rs.truncate == rp.get("truncate", True)
    if arch.family in ("qwen3_moe", "deepseek_v3"):
        assert arch.norm_topk_prob == hf.norm_topk_prob
    if arch.family == "deepseek_v3":
        assert arch.routed_scaling_factor == hf.routed_scaling_factor
        assert arch.rope_interleave == getattr(hf, "rope_interleave", True)
    if arch.family == "gpt_oss":
        assert arch.swiglu_limit == hf.swiglu_limit
    raw = json.loads(_entries()[name][1])["config"]
    raw = raw.get("text_config", raw)
    # (transformers' config classes fill in token ids a config.json omits; compare the ones it states)
    if "eos_token_id" in raw:
        eos = hf.eos_token_id
        assert arch.eos_token_ids == tuple(eos if isinstance(eos, list) else [eos])
    if "bos_token_id" in raw:
        assert arch.bos_token_id == hf.bos_token_id


def test_legacy_rope_scaling_spelling_and_defaults():
    base = dict(model_type="llama", vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=1024, rope_theta=5e5)
    old = arch_from_config({**base, "rope_scaling": {"type": "linear", "factor": 2}})
    assert old.rope_scaling.rope_type == "linear" and old.rope_scaling.factor == 2.0 and old.rope_theta == 5e5
    llama3 = arch_from_config({**base, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
                                                         "high_freq_factor": 4}})
    assert llama3.rope_scaling.original_max_position_embeddings == 1024  # defaults to the model's context
    plain = arch_from_config(base)
    assert plain.rope_scaling == RopeScaling() and plain.eos_token_ids == () and plain.bos_token_id is None
    assert arch_from_config({**base, "eos_token_id": 7}).eos_token_ids == (7,)
    with pytest.raises(ConfigError, match="rope_scaling"):
        arch_from_config({**base, "rope_scaling": "yarn"})
    with pytest.raises(ConfigError, match="eos_token_id"):
        arch_from_config({**base, "eos_token_id": "</s>"})
    with pytest.raises(ConfigError, match="'factor' must be a number"):
        arch_from_config({**base, "rope_scaling": {"rope_type": "yarn", "factor": "big"}})
