"""One request's failure never fails the requests sharing its batch (real backend): the sampler's clamps, and
the backend + async engine pinning a step failure on the sequence that caused it."""

from __future__ import annotations

import asyncio

import torch
from jalapeno.testing.torch_models import hf_greedy

from jalapeno.backends.torch import backend as backend_mod
from jalapeno.backends.torch.backend import TorchBackend
from jalapeno.backends.torch.sampler import RowSampling, sample
from jalapeno.engine import Engine, EngineConfig, SamplingParams
from jalapeno.server.async_engine import AsyncEngine, EngineError

CFG = EngineConfig(block_size=4, max_num_batched_tokens=64, max_num_seqs=8)


def test_tiny_temperature_and_top_p_are_greedy_not_nan():
    logits = torch.tensor([[0.5, 3.0, -1.0, 2.9]])
    for spec in (
        RowSampling(temperature=1e-38),
        RowSampling(temperature=1e-38, seed=3),
        RowSampling(temperature=1.0, top_p=1e-46, seed=3),
        RowSampling(temperature=0.5, top_p=1.4e-45),
    ):
        assert sample(logits, [spec]) == [1], spec  # argmax, as a greedy / one-token nucleus must give


async def _collect(aeng: AsyncEngine, prompts, params) -> list:
    subs = [aeng.submit(p, len(p), sp) for p, sp in zip(prompts, params)]
    out = []
    for _, q in subs:
        toks: list[int] = []
        while True:
            item = await asyncio.wait_for(q.get(), 60)
            if isinstance(item, EngineError):
                out.append(item)
                break
            toks.extend(item.new_token_ids)
            if item.finished:
                out.append(toks)
                break
    return out


def test_a_failing_sequence_is_aborted_alone(tiny_model, monkeypatch):
    """A sampler that fails for one request (seed 666): that request gets an error, the two sharing its
    batch finish with the tokens transformers generates for them alone."""
    hf, path = tiny_model("llama")
    real = backend_mod.sample

    def poisoned(logits, specs):
        if any(s.seed == 666 for s in specs):
            raise RuntimeError("probability tensor contains nan")
        return real(logits, specs)

    monkeypatch.setattr(backend_mod, "sample", poisoned)
    aeng = AsyncEngine(Engine(TorchBackend(path, num_blocks=64), CFG))
    prompts = [[5, 9, 33, 2], [7, 1, 8], [3, 3, 40, 12, 6]]
    params = [SamplingParams(max_tokens=6, temperature=0.0, seed=s) for s in (1, 666, 2)]
    aeng.start()
    try:
        got = asyncio.run(_collect(aeng, prompts, params))
    finally:
        aeng.stop()
    assert isinstance(got[1], EngineError) and "nan" in got[1].message
    assert got[0] == hf_greedy(hf, prompts[0], 6)
    assert got[2] == hf_greedy(hf, prompts[2], 6)
    assert aeng.engine.block_manager.num_used == 0
