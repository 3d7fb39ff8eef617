"""The torch backend builds from the one model description (:class:`ModelArch`, models/config.py), not from a
second reading of config.json: its modules hold exactly the parameters ModelArch counts and transformers
holds, a family the simulator knows but this backend does not run is refused in one line, and Mistral (in the
one family table, with its sliding window) generates what transformers generates."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from jalapeno.backends.torch import models as torch_models
from jalapeno.backends.torch.backend import TorchBackend
from jalapeno.backends.torch.generate import generate_tokens
from jalapeno.backends.torch.loader import load_model
from jalapeno.engine import EngineConfig, SamplingParams
from jalapeno.errors import ConfigError
from jalapeno.models import arch_from_config
from jalapeno.testing.torch_models import BASE, FAMILIES, hf_greedy


@pytest.mark.parametrize("family", list(FAMILIES))
def test_torch_modules_hold_the_parameters_modelarch_counts(family, tiny_model):
    hf, path = tiny_model(family)
    loaded = load_model(path)
    arch = loaded.config
    assert arch == arch_from_config(json.loads((path / "config.json").read_text()), path.name)
    ours = sum(p.numel() for p in loaded.model.parameters())
    assert ours == arch.total_params() == sum(p.numel() for p in hf.parameters())


def test_a_multimodal_wrapper_is_refused_in_one_line():
    text = {**BASE, "model_type": "deepseek_v3", "n_routed_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 8, "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
            "v_head_dim": 8}
    arch_from_config({"model_type": "kimi_k25", "text_config": text})  # the simulator takes it
    with pytest.raises(ConfigError, match="multimodal wrapper; the torch backend runs text-only"):
        torch_models.torch_arch({"model_type": "kimi_k25", "text_config": text})


def test_a_family_without_a_torch_module_is_refused(tiny_model, monkeypatch):
    _, path = tiny_model("mixtral")
    monkeypatch.delitem(torch_models.IMPLEMENTATIONS, "mixtral")
    with pytest.raises(ConfigError, match="'mixtral' .*not supported by the torch backend"):
        load_model(path)


def test_mistral_sliding_window_matches_transformers(tmp_path):
    """Mistral is in the one family table (it was only in the torch one); its sliding_window applies to every
    layer as in transformers: a 21-token prompt and 12 new tokens over a window of 8."""
    cfg = transformers.MistralConfig(**{**BASE, "sliding_window": 8, "head_dim": 16})
    torch.manual_seed(0)
    hf = transformers.MistralForCausalLM(cfg).eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    hf.save_pretrained(tmp_path)
    backend = TorchBackend(tmp_path)
    arch = backend.config
    assert arch.family == "llama" and arch.layer_types == ("sliding",) * 2 and arch.sliding_window == 8
    prompt = torch.randint(0, 128, (21,), generator=torch.Generator().manual_seed(7)).tolist()
    engine_cfg = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=1)
    (out,) = generate_tokens(backend, [prompt], SamplingParams(max_tokens=12, temperature=0.0), engine_cfg)
    assert out == hf_greedy(hf, prompt, 12)
