"""`jalapeno bench` against the in-process server speculating on a tiny random model: it scrapes the server's
speculative counters before and after the run into the result JSON (hand-checked against the backend's own
counters), and `jalapeno simulate --acceptance` reads that JSON."""

from __future__ import annotations

import json

import pytest

from jalapeno.cli import main
from jalapeno.testing import simulate_json

pytest.importorskip("prometheus_client")
pytest.importorskip("fastapi")
K = 3


@pytest.fixture(scope="module")
def spec_server(tiny_model, tmp_path_factory):
    import tokenizers
    import transformers

    from jalapeno.engine import EngineConfig
    from jalapeno.server.app import build_app
    from jalapeno.server.background import BackgroundServer
    from jalapeno.server.build import build_torch
    from jalapeno.speculative import SpeculativeConfig

    model, _ = tiny_model("llama")
    path = tmp_path_factory.mktemp("llama_tok")  # a copy with a tokenizer: the server needs one
    model.save_pretrained(path)
    vocab = {f"t{i}": i for i in range(model.config.vocab_size)}  # one word per id: any id decodes
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0").save_pretrained(path)
    served = build_torch(str(path), engine_config=EngineConfig(block_size=4, num_speculative_tokens=K),
                         speculative=SpeculativeConfig("ngram", num_speculative_tokens=K))
    srv = BackgroundServer(build_app(served.engine, served.codec, served.config)).start()
    yield served, srv
    srv.stop()


def test_bench_records_the_servers_spec_counters(tmp_path, capsys, spec_server):
    served, srv = spec_server
    before = dict(served.engine.backend.spec_decode_stats())
    out = tmp_path / "bench.json"
    data = tmp_path / "prompts.jsonl"  # token-id prompts that repeat a pattern: n-gram lookup finds matches
    data.write_text("".join(json.dumps({"prompt": [10 + i, 20, 30, 40, 50] * 4, "output_len": 12}) + "\n"
                            for i in range(4)))
    try:
        main(["bench", "--base-url", srv.url, "--no-progress", "-o", str(out), "--dataset", "file",
              "--dataset-path", str(data), "--num-prompts", "4", "--concurrency", "2", "--num-warmups", "0"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    printed = capsys.readouterr().out
    r = json.loads(out.read_text())
    after = served.engine.backend.spec_decode_stats()
    sd = r["spec_decode"]
    # the scraped increase equals the backend's own counters' increase, hand-differenced
    assert sd["num_drafts"] == after["num_drafts"] - before["num_drafts"] > 0
    assert sd["num_draft_tokens"] == after["num_draft_tokens"] - before["num_draft_tokens"]
    assert sd["num_accepted_tokens"] == after["num_accepted_tokens"] - before["num_accepted_tokens"]
    per_pos = [a - b for a, b in zip(after["num_accepted_tokens_per_pos"], before["num_accepted_tokens_per_pos"])]
    assert sd["num_accepted_tokens_per_pos"] == per_pos
    assert sd["acceptance_rate"] == pytest.approx(sd["num_accepted_tokens"] / sd["num_draft_tokens"])
    assert sd["acceptance_per_pos"] == pytest.approx([n / sd["num_drafts"] for n in per_pos])
    asks = after["num_draft_requests"] - before["num_draft_requests"]
    assert sd["draft_rate"] == pytest.approx(sd["num_drafts"] / asks)
    assert "Speculative Decoding" in printed and "Acceptance rate" in printed
    # ... and the simulator takes the bench JSON as its measured acceptance
    sim = ["--model", "llama-3.1-8b", "--hardware", "h100", "--isl", "64", "--osl", "32", "--num-prompts", "8",
           "--concurrency", "4", "--spec-decode", "ngram", "--spec-tokens", str(K), "--acceptance", str(out)]
    assert simulate_json(capsys, *sim)["completed"] == 8


def test_bench_against_a_plain_server_records_no_spec_counters(tmp_path, fast_server_url):
    out = tmp_path / "plain.json"
    try:
        main(["bench", "--base-url", fast_server_url, "--no-progress", "-o", str(out), "--input-len", "16",
              "--output-len", "4", "--num-prompts", "2", "--concurrency", "1"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    assert "spec_decode" not in json.loads(out.read_text())


@pytest.fixture(scope="module")
def fast_server_url():
    from jalapeno.server.app import build_app
    from jalapeno.server.background import BackgroundServer
    from jalapeno.server.build import build_sim

    served = build_sim("h100", "llama-3.1-8b", time_scale=0.0)
    srv = BackgroundServer(build_app(served.engine, served.codec, served.config)).start()
    yield srv.url
    srv.stop()
