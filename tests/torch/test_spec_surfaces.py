"""Speculative decoding surfaces: ``generate --speculative`` (same greedy tokens, counters in ``--json``), the
``/metrics`` counters under vLLM's names, and bad input in one line with exit 2."""

from __future__ import annotations

import json

import pytest

from jalapeno.testing.torch_models import hf_greedy, run_generate

PROMPT = [5, 17, 99, 3, 5, 17, 99, 3, 5, 17]


@pytest.mark.parametrize("method", ["ngram", "self"])
def test_generate_speculative_json_reports_counters(tiny_model, capsys, method):
    hf, path = tiny_model("qwen2")
    ids = ",".join(map(str, PROMPT))
    code, out, err = run_generate(["--model", str(path), "--prompt-token-ids", ids, "--max-tokens", "16", "--json",
                                   "--speculative", method, "--num-speculative-tokens", "4"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["token_ids"] == hf_greedy(hf, PROMPT, 16)
    sd = result["spec_decode"]
    assert sd["num_speculative_tokens"] == 4
    assert sd["num_draft_tokens"] == sum(sd["num_drafts_per_pos"]) > 0
    assert sd["num_accepted_tokens"] == sum(sd["num_accepted_tokens_per_pos"])
    # acceptance at a position implies acceptance at every earlier one
    assert sd["num_accepted_tokens_per_pos"] == sorted(sd["num_accepted_tokens_per_pos"], reverse=True)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--speculative", "ngram", "--num-speculative-tokens", "-1"], ">= 0"),
        (["--speculative", "ngram", "--num-speculative-tokens", "400"], "too large for the model's context"),
        (["--speculative", "draft"], "needs --draft-model"),
        (["--speculative", "medusa"], "unknown --speculative"),
        (["--num-speculative-tokens", "3"], "need --speculative"),
        (["--speculative", "self", "--draft-layers", "9"], "below the model's"),
        (["--speculative", "ngram", "--draft-model", "x"], "--draft-model is for --speculative draft"),
    ],
)
def test_generate_speculative_user_errors(tiny_model, capsys, args, needle):
    _, path = tiny_model("qwen2")
    code, _, err = run_generate(["--model", str(path), "--prompt-token-ids", "1,2"] + args, capsys)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_metrics_expose_vllm_spec_decode_counters(tiny_model):
    pytest.importorskip("prometheus_client")
    from jalapeno.backends.torch.backend import TorchBackend
    from jalapeno.engine import Engine, EngineConfig, SamplingParams
    from jalapeno.server.prom import ServerMetrics
    from jalapeno.speculative import SpeculativeConfig

    _, path = tiny_model("qwen2")
    backend = TorchBackend(path, num_blocks=64, speculative=SpeculativeConfig("ngram", num_speculative_tokens=3))
    engine = Engine(backend, EngineConfig(block_size=4, num_speculative_tokens=3))
    engine.add_request(PROMPT, SamplingParams(max_tokens=12, temperature=0.0))
    while engine.has_unfinished():
        engine.step()
    sd = backend.spec_decode_stats()
    text = ServerMetrics(lambda: {"spec_decode": sd}).render().decode()
    assert f"vllm:spec_decode_num_draft_tokens_total {float(sd['num_draft_tokens'])}" in text
    assert f"vllm:spec_decode_num_accepted_tokens_total {float(sd['num_accepted_tokens'])}" in text
    for j, n in enumerate(sd["num_accepted_tokens_per_pos"]):
        assert f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{j}"}} {float(n)}' in text
    assert "spec_decode" not in ServerMetrics(lambda: {}).render().decode()  # plain engines: no such series
