"""Every model family against Hugging Face transformers: prefill logits and 32-token greedy generation of
several prompts of different lengths, batched together through the shared Engine (paged KV, block size 4)."""

from __future__ import annotations

import pytest
import torch

from jalapeno.backends.torch.attention import SeqSlice
from jalapeno.backends.torch.backend import TorchBackend
from jalapeno.backends.torch.generate import generate_tokens
from jalapeno.backends.torch.runner import PYTORCH_ONLY
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
def test_rows_without_logits_skip_the_last_layer_tail(family, tiny_model):
    """A step that samples some rows runs the last layer's residual, norm and MLP for those rows only
    (``DecoderLayer`` ``keep``). The logits it returns equal transformers' rows, a chunk that samples nothing still
    writes its K/V (the next chunk's logits stay right), and a step that samples every row is unchanged. Two
    prompts, the PyTorch path (fused decode kernel off, so the prefill reaches ``CausalLM.forward``)."""
    hf, path = tiny_model(family)
    backend = TorchBackend(path)
    backend.set_decode_policy(PYTORCH_ONLY)
    backend.num_kv_blocks(4)
    a, b = _prompts(3)[1], _prompts(3)[2]  # 9 and 17 tokens
    with torch.no_grad():
        ref_a, ref_b = (hf(torch.tensor([p])).logits[0] for p in (a, b))
    ta, tb = [7, 2, 11], [5, 0, 9, 12, 3]
    # both prompts' first parts in one step, only the first prompt's last row sampled
    got = backend.runner.forward([SeqSlice(0, 9, ta), SeqSlice(0, 10, tb)], a + b[:10], [8])
    torch.testing.assert_close(got, ref_a[8:9], atol=1e-4, rtol=1e-4)
    nothing = backend.runner.forward([SeqSlice(10, 4, tb)], b[10:14], [])  # a chunk short of the prompt's end
    assert nothing.shape == (0, ref_b.shape[-1])
    rest = backend.runner.forward([SeqSlice(14, 3, tb)], b[14:], [0, 2])  # two of three rows
    torch.testing.assert_close(rest, ref_b[[14, 16]], atol=1e-4, rtol=1e-4)
    every = backend.runner.forward([SeqSlice(0, 9, ta)], a, list(range(9)))
    torch.testing.assert_close(every, ref_a, atol=1e-4, rtol=1e-4)


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
