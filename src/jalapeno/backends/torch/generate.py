"""Offline generation: queue every prompt in one engine and step it until all finish (continuous batching)."""

from __future__ import annotations

from jalapeno.engine import Engine, EngineConfig, SamplingParams
from jalapeno.engine.interface import Backend


def generate_tokens(
    backend: Backend,
    prompts: list[list[int]],
    sampling: SamplingParams | list[SamplingParams],
    config: EngineConfig | None = None,
) -> list[list[int]]:
    """Output token ids for each prompt, in prompt order, produced through the shared engine/scheduler."""
    engine = Engine(backend, config or EngineConfig())
    params = sampling if isinstance(sampling, list) else [sampling] * len(prompts)
    seqs = [engine.add_request(p, sp) for p, sp in zip(prompts, params)]
    while engine.has_unfinished():
        engine.step()
    return [list(s.output_token_ids or []) for s in seqs]
