"""Speculative decoding on the real backend: greedy output token-identical to plain decoding (reference:
transformers ``generate``) for every tiny model family with each proposer, batched, with preemption and chunked
prefill in the run; no KV block leaks with random aborts."""

from __future__ import annotations

import random

import pytest
import torch

from jalapeno.backends.torch.backend import TorchBackend
from jalapeno.engine import Engine, EngineConfig, SamplingParams
from jalapeno.speculative import SpeculativeConfig
from jalapeno.testing.torch_models import FAMILIES, hf_greedy

GREEDY = SamplingParams(max_tokens=20, temperature=0.0)
K = 3


def _prompts(lens, seed=3, vocab=128):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in lens:  # half random, half a repeated phrase, so n-gram lookups find matches in the prompt
        head = torch.randint(0, vocab, (n // 2,), generator=g).tolist()
        out.append(head + (head * 2)[: n - len(head)])
    return out


def _run(engine, prompts, params=GREEDY):
    seqs = [engine.add_request(p, params) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    return [s.output_token_ids for s in seqs]


@pytest.mark.parametrize("method", ["ngram", "self"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_speculative_equals_plain(family, method, tiny_model):
    hf, path = tiny_model(family)
    prompts = _prompts((5, 23, 9, 14))
    spec = SpeculativeConfig(method, num_speculative_tokens=K, draft_layers=1, probe_tokens=1000)
    # 18 blocks of 4 tokens for 4 sequences of up to 43 (+K) tokens: preemption; 12-token budget: chunked prefill
    backend = TorchBackend(path, num_blocks=18, speculative=spec)
    engine = Engine(backend, EngineConfig(block_size=4, max_num_batched_tokens=16, max_num_seqs=4,
                                          num_speculative_tokens=K))
    outs = _run(engine, prompts)
    assert outs == [hf_greedy(hf, p, GREEDY.max_tokens) for p in prompts]
    st = backend.speculator.stats
    assert st.num_draft_tokens > 0 and st.num_accepted_tokens > 0, st
    assert engine.stats.num_preemptions > 0
    assert engine.block_manager.num_free == engine.block_manager.num_blocks


def test_no_block_leaks_with_random_aborts(tiny_model):
    """1,000 speculative requests (short, sampled and greedy) with random aborts leave every block free."""
    _, path = tiny_model("llama")
    rng = random.Random(0)
    backend = TorchBackend(path, num_blocks=40, speculative=SpeculativeConfig("ngram", num_speculative_tokens=K))
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=16, num_speculative_tokens=K,
                       enable_prefix_caching=True)
    engine = Engine(backend, cfg)
    base = [rng.randrange(128) for _ in range(6)]
    live = []
    for i in range(1000):
        prompt = base[: rng.randint(1, 6)] + [rng.randrange(128) for _ in range(rng.randint(0, 3))]
        params = SamplingParams(max_tokens=rng.randint(1, 6), temperature=rng.choice([0.0, 1.0]), seed=i)
        live.append(engine.add_request(prompt, params).seq_id)
        if rng.random() < 0.5:
            engine.step()
        if rng.random() < 0.2:
            engine.abort(live.pop(rng.randrange(len(live))))
    while engine.has_unfinished():
        engine.step()
    bm = engine.block_manager
    assert backend.speculator.stats.num_draft_tokens > 0
    assert bm.num_free == bm.num_blocks, (bm.num_free, bm.num_blocks)


def test_greedy_draft_model_equals_plain(tiny_model):
    """A separate draft model (another tiny family, same vocabulary) with its own paged KV cache."""
    hf, path = tiny_model("llama")
    _, draft_path = tiny_model("qwen2")
    prompts = _prompts((5, 23, 9, 14))
    spec = SpeculativeConfig("draft", num_speculative_tokens=K, draft_model=str(draft_path), probe_tokens=1000)
    backend = TorchBackend(path, num_blocks=18, speculative=spec)
    engine = Engine(backend, EngineConfig(block_size=4, max_num_batched_tokens=16, max_num_seqs=4,
                                          num_speculative_tokens=K))
    assert _run(engine, prompts) == [hf_greedy(hf, p, GREEDY.max_tokens) for p in prompts]
    assert backend.speculator.stats.num_draft_tokens > 0
    assert engine.stats.num_preemptions > 0
    assert engine.block_manager.num_free == engine.block_manager.num_blocks


def test_draft_model_sampled_run_with_itself_as_draft_accepts_everything(tiny_model):
    """The target as its own draft: p == q, so rejection sampling must accept every draft token (a check of
    the draft's KV catch-up: a stale draft cache would make q differ from p)."""
    _, path = tiny_model("llama")
    spec = SpeculativeConfig("draft", num_speculative_tokens=K, draft_model=str(path))
    backend = TorchBackend(path, num_blocks=64, speculative=spec)
    engine = Engine(backend, EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=4,
                                          num_speculative_tokens=K))
    _run(engine, _prompts((5, 12)), SamplingParams(max_tokens=17, temperature=1.0, seed=1))
    st = backend.speculator.stats
    assert st.num_draft_tokens > 0 and st.num_accepted_tokens == st.num_draft_tokens


def test_draft_model_with_another_vocabulary_is_refused(tiny_model, tmp_path):
    import transformers

    from jalapeno.errors import ConfigError

    hf, path = tiny_model("llama")
    cfg = transformers.LlamaConfig(**{**hf.config.to_dict(), "vocab_size": 64})
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="vocabulary"):
        TorchBackend(path, num_blocks=8, speculative=SpeculativeConfig("draft", draft_model=str(tmp_path)))


def test_draft_model_kv_counts_in_the_kv_budget(tiny_model):
    """The draft's paged KV (as many blocks as the target's) shares ``kv_cache_gb``: blocks = budget / (target +
    draft bytes per block), hand-counted from the HF configs (float32: 4 bytes; K and V per layer)."""
    hf, path = tiny_model("llama")
    draft_hf, draft_path = tiny_model("qwen2")

    def per_token(c):
        return 2 * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * c.num_hidden_layers * 4

    gb, bs = 0.001, 4
    budget = gb * 2**30
    plain = TorchBackend(path, kv_cache_gb=gb).num_kv_blocks(bs)
    assert plain == int(budget // (bs * per_token(hf.config)))
    spec = SpeculativeConfig("draft", num_speculative_tokens=K, draft_model=str(draft_path))
    drafted = TorchBackend(path, kv_cache_gb=gb, speculative=spec)
    n = drafted.num_kv_blocks(bs)
    assert n == int(budget // (bs * (per_token(hf.config) + per_token(draft_hf.config)))) < plain
    # the two caches together stay within the budget
    target = drafted.runner
    draft_runner = drafted.speculator.proposer._draft_runner()
    used = sum(t.numel() * t.element_size() for r in (target, draft_runner) for t in _cache_tensors(r))
    assert used <= budget
    # n-gram and self-speculation keep no KV of their own: the same blocks as plain
    ngram = TorchBackend(path, kv_cache_gb=gb, speculative=SpeculativeConfig("ngram", num_speculative_tokens=K))
    assert ngram.num_kv_blocks(bs) == plain


def _cache_tensors(runner):
    out = []
    for c in runner.kv_cache:
        out.extend(x for x in (c if isinstance(c, (tuple, list)) else [c]) if hasattr(x, "numel"))
    return out
