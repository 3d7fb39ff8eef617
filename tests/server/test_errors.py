"""OpenAI-style errors: status codes and the {"error": {message, type, param, code}} body, never a traceback."""

from __future__ import annotations

import httpx
import openai
import pytest

MODEL = "llama-3.1-8b"


def _check_error(r: httpx.Response, status: int, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"] and "Traceback" not in err["message"] and "\n" not in err["message"]
    if param is not None:
        assert err["param"] == param
    return err


@pytest.fixture
def url(sim_server):
    return sim_server[1].url


def test_malformed_json_is_400(url):
    r = httpx.post(
        url + "/v1/completions", content=b'{"model": "x", "prompt": ', headers={"content-type": "application/json"}
    )
    assert _check_error(r, 400)["code"] == "invalid_json"


def test_non_object_body_is_400(url):
    _check_error(httpx.post(url + "/v1/completions", json=[1, 2]), 400)


def test_missing_prompt_is_400(url):
    err = _check_error(httpx.post(url + "/v1/completions", json={"model": MODEL}), 400, param="prompt")
    assert "prompt" in err["message"]


def test_missing_messages_is_400(url):
    _check_error(httpx.post(url + "/v1/chat/completions", json={"model": MODEL}), 400, param="messages")


@pytest.mark.parametrize("max_tokens", [0, -3])
def test_non_positive_max_tokens_is_400(url, max_tokens):
    r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "a", "max_tokens": max_tokens})
    _check_error(r, 400, param="max_tokens")


def test_prompt_plus_max_tokens_beyond_context_is_400(url, sim_server):
    ctx = sim_server[0].config.max_model_len
    r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "a b c", "max_tokens": ctx - 2})
    assert _check_error(r, 400, param="max_tokens")["code"] == "context_length_exceeded"
    # exactly at the limit is fine
    ok = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "a b c", "max_tokens": 1})
    assert ok.status_code == 200


def test_prompt_longer_than_context_is_400(url, sim_server):
    ctx = sim_server[0].config.max_model_len
    r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": [5] * ctx, "max_tokens": 1})
    _check_error(r, 400, param="prompt")


def test_unknown_model_is_404(url):
    r = httpx.post(
        url + "/v1/chat/completions", json={"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}
    )
    assert _check_error(r, 404, param="model")["code"] == "model_not_found"


def test_unsupported_options_are_refused_not_ignored(url):
    for extra in ({"logprobs": 2}, {"echo": True}):
        body = {"model": MODEL, "prompt": "a", **extra}
        _check_error(httpx.post(url + "/v1/completions", json=body), 400, param=next(iter(extra)))
    ok = {"model": MODEL, "prompt": "a", "max_tokens": 1, "logprobs": None, "echo": False, "user": "u"}
    assert httpx.post(url + "/v1/completions", json=ok).status_code == 200


def test_n_above_one_is_400(url):
    _check_error(httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "a", "n": 2}), 400, param="n")


def test_bad_types_are_400(url):
    _check_error(httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "a", "max_tokens": "many"}), 400)
    _check_error(httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": []}), 400, param="prompt")
    _check_error(httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "a", "temperature": -1}), 400)
    bad_role = {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}
    _check_error(httpx.post(url + "/v1/chat/completions", json=bad_role), 400)


def test_token_id_outside_vocabulary_is_400(url, sim_server):
    vocab = sim_server[0].config.vocab_size
    _check_error(httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": [1, vocab]}), 400, param="prompt")


def test_stream_errors_come_before_the_stream(url):
    r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "a", "max_tokens": 0, "stream": True})
    _check_error(r, 400)


def test_unknown_route_is_openai_style_404(url):
    _check_error(httpx.get(url + "/v1/nothing-here"), 404)


def test_health_and_models(url):
    h = httpx.get(url + "/health")
    assert h.status_code == 200 and h.json()["status"] == "ok"
    assert httpx.get(url + "/v1/models").json()["data"][0]["id"] == MODEL


# --- API key ------------------------------------------------------------------------------------------
def test_wrong_or_missing_api_key_is_401(keyed_server):
    url = keyed_server[1].url
    body = {"model": MODEL, "prompt": "a", "max_tokens": 1}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "test-key-123"}):
        err = _check_error(httpx.post(url + "/v1/completions", json=body, headers=headers), 401)
        assert err["type"] == "authentication_error"
    _check_error(httpx.get(url + "/v1/models"), 401)
    ok = httpx.post(url + "/v1/completions", json=body, headers={"Authorization": "Bearer test-key-123"})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 1


def test_sdk_sees_authentication_error(keyed_server):
    c = openai.OpenAI(base_url=keyed_server[1].url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        c.completions.create(model=MODEL, prompt="a", max_tokens=1)
    good = openai.OpenAI(base_url=keyed_server[1].url + "/v1", api_key="test-key-123", max_retries=0)
    assert good.completions.create(model=MODEL, prompt="a", max_tokens=2).usage.completion_tokens == 2


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        {"tool_choice": "auto"},
        {"response_format": {"type": "json_object"}},
        {"best_of": 3},
        {"functions": [{"name": "f"}]},
    ],
)
def test_unsupported_fields_are_400_not_ignored(url, extra):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], **extra}
    err = _check_error(httpx.post(url + "/v1/chat/completions", json=body), 400, param=next(iter(extra)))
    assert "support" in err["message"]


@pytest.mark.parametrize("extra", [{"tool_choice": "none"}, {"response_format": {"type": "text"}}, {"best_of": 1}])
def test_no_op_values_of_those_fields_are_served(url, extra):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 1, **extra}
    assert httpx.post(url + "/v1/chat/completions", json=body).status_code == 200


@pytest.mark.parametrize(
    "field, value", [("max_tokens", "4"), ("max_tokens", True), ("temperature", "0.5"), ("stream", "yes")]
)
def test_types_are_strict(url, field, value):
    body = {"model": MODEL, "prompt": "a b", field: value}
    _check_error(httpx.post(url + "/v1/completions", json=body), 400, param=field)
