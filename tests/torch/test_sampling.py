"""Sampling: seeded reproducibility through the engine, and the sampler's distribution against softmax."""

from __future__ import annotations

import math

import numpy as np
import torch

from jalapeno.backends.torch.backend import TorchBackend
from jalapeno.backends.torch.generate import generate_tokens
from jalapeno.backends.torch.sampler import RowSampling, filter_logits, sample
from jalapeno.engine import EngineConfig, SamplingParams

CFG = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=8)


def test_seeded_sampling_is_reproducible_and_batch_independent(tiny_model):
    _, path = tiny_model("qwen3")
    backend = TorchBackend(path)
    prompt = [5, 9, 33, 2, 71]
    sp = SamplingParams(max_tokens=20, temperature=1.0, top_p=0.95, top_k=50, seed=1234)
    alone = generate_tokens(backend, [prompt], sp, CFG)[0]
    others = [SamplingParams(max_tokens=20, temperature=1.0, seed=s) for s in (1, 2)]
    batched = generate_tokens(backend, [[1, 2, 3], prompt, [4] * 9], [others[0], sp, others[1]], CFG)[1]
    assert alone == batched
    other_seed = generate_tokens(backend, [prompt], SamplingParams(max_tokens=20, temperature=1.0, seed=99), CFG)[0]
    assert other_seed != alone
    greedy = generate_tokens(backend, [prompt], SamplingParams(max_tokens=20, temperature=0.0), CFG)[0]
    top1 = generate_tokens(backend, [prompt], SamplingParams(max_tokens=20, temperature=0.7, top_k=1, seed=3), CFG)[0]
    assert top1 == greedy


def test_sample_frequencies_follow_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    n = 4000
    draws = [sample(logits, [RowSampling(temperature=0.8, seed=7, index=i)])[0] for i in range(n)]
    freq = np.bincount(draws, minlength=4) / n
    p = np.exp(np.array([2.0, 1.0, 0.0, -1.0]) / 0.8)
    p /= p.sum()
    sigma = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(freq - p) < 5 * sigma + 1e-3)


def test_top_k_and_top_p_filters():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    logits = torch.tensor(np.log(probs), dtype=torch.float32)
    # top-p 0.8: {0.5, 0.3} already reaches 0.8, the rest is cut
    kept = torch.isfinite(filter_logits(logits, 1.0, 0, 0.8)).tolist()
    assert kept == [True, True, False, False]
    kept = torch.isfinite(filter_logits(logits, 1.0, 0, 0.81)).tolist()
    assert kept == [True, True, True, False]
    kept = torch.isfinite(filter_logits(logits, 1.0, 3, 1.0)).tolist()
    assert kept == [True, True, True, False]
    # the top token always survives, however small top_p is
    assert torch.isfinite(filter_logits(logits, 1.0, 0, 1e-6)).tolist() == [True, False, False, False]
    draws = {sample(logits[None], [RowSampling(1.0, 1.0, 2, seed=1, index=i)])[0] for i in range(200)}
    assert draws == {0, 1}
    assert math.isclose(torch.softmax(filter_logits(logits, 1.0, 2, 1.0), -1)[0].item(), 0.5 / 0.8, rel_tol=1e-5)
