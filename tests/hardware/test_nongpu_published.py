"""Chips without serving calibration whose profile was FIXED against a published single-stream figure: the
prediction (tokens/s per user = 1000 / median TPOT, one request stream) is within 2x of the figure. The figures
are copied here with their sources; benchmarks/nongpu_check.py prints the full table (docs/fidelity.md)."""

import pytest

from jalapeno.sim.scenario import Scenario, run_scenario
from jalapeno.hardware import get_chip

TECHPOWERUP = "https://techpowerup.com/news-tags/Processor?page=3"  # Groq LPU news item, [S20] of hardware-facts.md
CEREBRAS = "https://cerebras.ai/blog/introducing-cerebras-inference-ai-at-instant-speed"  # Aug 2024 launch

PUBLISHED = [
    # chip, model (proxy), tp, pp, weights, published tok/s/user, source
    ("cerebras-wse3", "llama-3.1-8b", 1, 1, "native", 1800, CEREBRAS),  # Llama 3.1 8B, 16-bit, one CS-3 (fit)
    ("groq-lpu", "llama-3.1-70b", 16, 32, "fp8", 300, TECHPOWERUP),  # Llama 2 70B (fit)
    ("groq-lpu", "llama-3.1-8b", 8, 16, "native", 750, TECHPOWERUP),  # Llama 2 7B (held out)
    ("groq-lpu", "mixtral-8x7b", 16, 32, "native", 480, TECHPOWERUP),  # Mixtral 8x7B (held out)
]


def single_stream(chip: str, model: str, tp: int, pp: int, weights: str) -> dict:
    # the engine's token budget (256) decides the activation reserve, so a model fits in 230 MB Groq SRAM
    return run_scenario(Scenario(model=model, hardware=chip, tp=tp, pp=pp, precision=weights, isl=1024, osl=512,
                                 concurrency=1, num_prompts=2, max_num_seqs=1, max_num_batched_tokens=256))


@pytest.mark.parametrize("chip, model, tp, pp, weights, published, source", PUBLISHED)
def test_single_stream_within_2x_of_the_published_figure(chip, model, tp, pp, weights, published, source):
    m = single_stream(chip, model, tp, pp, weights)
    predicted = m["median_interactivity"]
    assert published / 2 <= predicted <= published * 2, (chip, model, predicted, published, source)
    assert m["confidence"]["status"] == "calibrated" and m["confidence"]["points"] == 1
    # the fix is the one named parameter, in the chip YAML, with the figure as its source
    eff = get_chip(chip).efficiency
    assert eff.layer_overhead_us > 0 and source in eff.source and "FITTED" in eff.source


def test_the_engine_token_budget_sets_the_activation_reserve():
    # 230 MB of SRAM per Groq chip: 8,192 tokens of activations (~0.36 GB at tp8) leave no room for KV, 256 do
    from jalapeno.errors import CapacityError

    small = single_stream("groq-lpu", "llama-3.1-8b", 8, 16, "native")
    assert small["sim"]["kv_capacity_tokens_per_replica"] > 1024
    with pytest.raises(CapacityError, match="leave no room for the KV cache"):
        run_scenario(Scenario(model="llama-3.1-8b", hardware="groq-lpu", tp=8, pp=16, isl=1024, osl=512,
                              concurrency=1, num_prompts=2, max_num_seqs=1, max_num_batched_tokens=8192))
