"""Every model family against Hugging Face transformers: prefill logits and 32-token greedy generation of
several prompts of different lengths, batched together through the shared Engine (paged KV, block size 4)."""

from __future__ import annotations

import pytest
import torch

from jalapeno.backends.torch.attention import SeqSlice
from jalapeno.backends.torch.backend import TorchBackend
from jalapeno.backends.torch.generate import generate_tokens
from jalapeno.engine import EngineConfig, SamplingParams

from jalapeno.testing.torch_models import FAMILIES, hf_greedy

PROMPT_LENS = (3, 9, 17, 6)


def _prompts(seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 128, (n,), generator=g).tolist() for n in PROMPT_LENS]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_prefill_logits_match_transformers(family, tiny_model):
    hf, path = tiny_model(family)
    backend = TorchBackend(path)
    backend.num_kv_blocks(4)
    prompt = _prompts(2)[2]
    # scatter the sequence over non-contiguous blocks and feed it in two chunks (cached prefix + new tokens)
    table = [7, 2, 11, 5, 0]
    first = backend.runner.forward([SeqSlice(0, 10, table)], prompt[:10], list(range(10)))
    rest = backend.runner.forward([SeqSlice(10, 7, table)], prompt[10:], list(range(7)))
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(torch.cat([first, rest]), ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_batched_greedy_generation_matches_transformers(family, tiny_model):
    hf, path = tiny_model(family)
    prompts = _prompts()
    backend = TorchBackend(path)
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=8)
    outs = generate_tokens(backend, prompts, SamplingParams(max_tokens=32, temperature=0.0), cfg)
    for prompt, out in zip(prompts, outs):
        assert out == hf_greedy(hf, prompt, 32)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("layout", ["single", "batched"])
def test_single_sequence_greedy_matches_transformers(family, layout, tiny_model):
    """Batch-1 decode: one-row GEMVs on either weight layout and the mask-free attention path."""
    hf, path = tiny_model(family)
    prompt = _prompts(3)[1]
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=1)
    backend = TorchBackend(path, weight_layout=layout)
    (out,) = generate_tokens(backend, [prompt], SamplingParams(max_tokens=24, temperature=0.0), cfg)
    assert out == hf_greedy(hf, prompt, 24)
