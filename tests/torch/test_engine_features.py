"""Engine features on the real backend leave greedy outputs unchanged (reference: transformers generate):
preemption by recompute under a tiny KV budget, chunked prefill under a small token budget, prefix caching."""

from __future__ import annotations

import torch

from jalapeno.backends.torch.backend import TorchBackend
from jalapeno.engine import Engine, EngineConfig, SamplingParams

from jalapeno.testing.torch_models import hf_greedy

GREEDY = SamplingParams(max_tokens=24, temperature=0.0)


class RecordingBackend(TorchBackend):
    """Remembers every scheduled chunk as (seq_id, start, num_tokens)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.chunks: list[tuple] = []
        self.steps_per_call: list[int] = []

    def execute(self, batch):
        self.steps_per_call.append(batch.num_steps)
        self.chunks += [(c.seq.seq_id, c.start, c.num_tokens) for c in batch.chunks]
        return super().execute(batch)


def _prompts(lens, seed=3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 128, (n,), generator=g).tolist() for n in lens]


def _run(engine: Engine, prompts, params=GREEDY):
    seqs = [engine.add_request(p, params) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    return [s.output_token_ids for s in seqs]


def test_preemption_by_recompute_keeps_outputs(tiny_model):
    hf, path = tiny_model("gpt_oss")  # sliding-window + sink layers through recompute too
    prompts = _prompts((5, 11, 8, 14))
    backend = TorchBackend(path, num_blocks=14)  # 4 sequences of up to 38 tokens need 40 blocks of 4
    engine = Engine(backend, EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=4))
    outs = _run(engine, prompts)
    assert engine.stats.num_preemptions > 0
    assert outs == [hf_greedy(hf, p, 24) for p in prompts]


def test_chunked_prefill_keeps_outputs(tiny_model):
    hf, path = tiny_model("llama")
    prompts = _prompts((23, 4, 17))
    backend = RecordingBackend(path)
    engine = Engine(backend, EngineConfig(block_size=4, max_num_batched_tokens=6, max_num_seqs=3))
    outs = _run(engine, prompts)
    chunked = [c for c in backend.chunks if c[1] > 0 and c[2] > 1]  # a prefill chunk after a cached part
    assert chunked, "the 6-token budget must split the 23-token prompt"
    assert outs == [hf_greedy(hf, p, 24) for p in prompts]


def test_prefix_caching_reuses_blocks_and_keeps_outputs(tiny_model):
    hf, path = tiny_model("deepseek_v3")  # MLA latent cache shared between sequences
    shared = _prompts((13,), seed=5)[0]
    tails = _prompts((3, 6), seed=6)
    prompts = [shared + [7], shared + tails[0], shared + tails[1]]
    backend = RecordingBackend(path)
    engine = Engine(backend, EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=4, enable_prefix_caching=True))
    first = engine.add_request(prompts[0], GREEDY)
    engine.step()  # prefill of the first prompt registers its full blocks
    later = [engine.add_request(p, GREEDY) for p in prompts[1:]]
    while engine.has_unfinished():
        engine.step()
    first_chunk = {}
    for seq_id, start, _ in backend.chunks:
        first_chunk.setdefault(seq_id, start)
    assert [first_chunk[s.seq_id] for s in later] == [12, 12]  # 3 shared blocks of 4 tokens were not recomputed
    outs = [first.output_token_ids] + [s.output_token_ids for s in later]
    assert outs == [hf_greedy(hf, p, 24) for p in prompts]


def test_multi_step_decode_keeps_outputs(tiny_model):
    hf, path = tiny_model("qwen3")
    prompts = _prompts((4, 10, 7))
    backend = RecordingBackend(path, max_multi_step=4)
    engine = Engine(backend, EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=4))
    outs = _run(engine, prompts)
    assert max(backend.steps_per_call) > 1  # some calls ran several decode steps in the backend
    assert outs == [hf_greedy(hf, p, 24) for p in prompts]
