"""The official OpenAI Python SDK against the real server (simulated backend)."""

from __future__ import annotations

import openai
import pytest

SIM_MODEL = "llama-3.1-8b"  # what tests/server/conftest.py serves


@pytest.fixture
def client(sim_server):
    _, srv = sim_server
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=30)


def _expected(n: int) -> str:
    # the sim path renders the k-th generated token as " tok<k>"
    return "".join(f" tok{k}" for k in range(n))


def test_models_lists_the_served_model(client):
    ids = [m.id for m in client.models.list().data]
    assert ids == [SIM_MODEL]


def test_plain_completion_text_and_usage(client):
    r = client.completions.create(model=SIM_MODEL, prompt="one two three four", max_tokens=7)
    assert r.choices[0].text == _expected(7)
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (4, 7, 11)


def test_completion_with_token_id_prompt(client):
    r = client.completions.create(model=SIM_MODEL, prompt=[11, 22, 33], max_tokens=2)
    assert r.usage.prompt_tokens == 3 and r.choices[0].text == _expected(2)


def test_streamed_completion_one_chunk_per_token_and_usage(client):
    stream = client.completions.create(
        model=SIM_MODEL, prompt="a b", max_tokens=5, stream=True, stream_options={"include_usage": True}
    )
    texts, usage, finish = [], None, None
    for ch in stream:
        if ch.choices:
            texts.append(ch.choices[0].text)
            finish = ch.choices[0].finish_reason or finish
        if ch.usage:
            usage = ch.usage
    assert texts == [f" tok{k}" for k in range(5)]
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 5 and usage.prompt_tokens == 2


def test_plain_chat_completion(client):
    r = client.chat.completions.create(
        model=SIM_MODEL, messages=[{"role": "user", "content": "hello there"}], max_tokens=4
    )
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == _expected(4)
    assert r.usage.completion_tokens == 4 and r.usage.prompt_tokens > 2


def test_streamed_chat_sends_role_with_first_content(client):
    stream = client.chat.completions.create(
        model=SIM_MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content = [c for c in chunks if c.choices]
    # no content-free first chunk: the role arrives together with the first token
    assert content[0].choices[0].delta.role == "assistant"
    assert content[0].choices[0].delta.content == " tok0"
    assert "".join(c.choices[0].delta.content or "" for c in content) == _expected(3)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


def test_stream_without_include_usage_has_no_usage_chunk(client):
    chunks = list(client.completions.create(model=SIM_MODEL, prompt="x", max_tokens=2, stream=True))
    assert all(c.usage is None for c in chunks) and len(chunks) == 2


def test_stop_string_cuts_text(client):
    r = client.completions.create(model=SIM_MODEL, prompt="x", max_tokens=20, stop=[" tok3"])
    assert r.choices[0].text == _expected(3)
    assert r.choices[0].finish_reason == "stop"


def test_stop_string_in_stream(client):
    stream = client.completions.create(model=SIM_MODEL, prompt="x", max_tokens=20, stop=["tok5"], stream=True)
    chunks = [c for c in stream if c.choices]
    assert "".join(c.choices[0].text for c in chunks) == _expected(5) + " "
    assert chunks[-1].choices[0].finish_reason == "stop"
