"""Bounded requests: a body-size limit (413), 400s (not 500s) for text that is not text and JSON nested too deep,
and prompts too long for the context refused before they are tokenised in full."""

from __future__ import annotations

import httpx
import pytest

from jalapeno.server.app import build_app
from jalapeno.server.background import BackgroundServer
from jalapeno.server.build import build_sim
from jalapeno.server.codec import PlaceholderCodec

MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def small_limit_url():
    served = build_sim("h100", MODEL, time_scale=0.0)
    served.config.max_request_bytes = 4096
    with BackgroundServer(build_app(served.engine, served.codec, served.config)) as srv:
        yield srv.url


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def test_body_over_the_limit_is_413(small_limit_url):
    body = {"model": MODEL, "prompt": "word " * 2000, "max_tokens": 1}
    err = _error(httpx.post(small_limit_url + "/v1/completions", json=body), 413)
    assert err["code"] == "request_too_large" and "4096" in err["message"]


def test_chunked_body_over_the_limit_is_413(small_limit_url):
    """No Content-Length to trust: the limit is counted while reading."""

    def chunks():
        yield b'{"model": "' + MODEL.encode() + b'", "prompt": "'
        for _ in range(100):
            yield b"x " * 50
        yield b'"}'

    r = httpx.post(small_limit_url + "/v1/completions", content=chunks(), headers={"content-type": "application/json"})
    assert _error(r, 413)["code"] == "request_too_large"


def test_body_under_the_limit_is_served(small_limit_url):
    r = httpx.post(small_limit_url + "/v1/completions", json={"model": MODEL, "prompt": "a b c", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "\\ud800", "prompt": "a"}',
        b'{"model": "' + MODEL.encode() + b'", "prompt": "a \\udfff b"}',
        b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "\\ud83d"}]}',
    ],
)
def test_lone_surrogate_is_400(sim_server, raw):
    url = sim_server[1].url
    for route in ("/v1/completions", "/v1/chat/completions"):
        r = httpx.post(url + route, content=raw, headers={"content-type": "application/json"})
        assert "surrogate" in _error(r, 400)["message"]


def test_paired_surrogates_are_text(sim_server):
    raw = b'{"model": "' + MODEL.encode() + b'", "prompt": "smile \\ud83d\\ude00", "max_tokens": 1}'
    r = httpx.post(sim_server[1].url + "/v1/completions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_deep_json_is_400(sim_server):
    raw = b'{"model": "x", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = httpx.post(sim_server[1].url + "/v1/completions", content=raw, headers={"content-type": "application/json"})
    assert _error(r, 400)["code"] == "invalid_json"


class _Counting(PlaceholderCodec):
    """The sim codec with an honest lower bound (one token per 8 bytes at most) and a count of full tokenisations."""

    def __init__(self) -> None:
        self.full = 0

    def prompt_len(self, text: str) -> int:
        self.full += 1
        return super().prompt_len(text)

    def min_prompt_len(self, text: str, limit: int) -> int:
        return len(text.encode()) // 8


def test_too_long_prompt_is_refused_before_tokenising():
    served = build_sim("h100", MODEL, time_scale=0.0)
    codec = _Counting()
    ctx = served.config.max_model_len
    with BackgroundServer(build_app(served.engine, codec, served.config)) as srv:
        body = {"model": MODEL, "prompt": "abcdefg " * (ctx + 10), "max_tokens": 1}
        err = _error(httpx.post(srv.url + "/v1/completions", json=body, timeout=60), 400)
        assert err["code"] == "context_length_exceeded" and codec.full == 0
        ok = httpx.post(srv.url + "/v1/completions", json={"model": MODEL, "prompt": "a b", "max_tokens": 1})
        assert ok.status_code == 200 and codec.full == 1
