"""Streaming client for one request to an OpenAI-compatible endpoint, timed the way vLLM's bench client times it.

Per request (seconds, ``time.perf_counter`` from just before the HTTP request is sent):
  * TTFT = arrival of the first SSE chunk whose ``choices`` carry generated content (non-empty ``text`` /
    ``delta.content`` / ``delta.reasoning_content``, or token ids);
  * E2EL = arrival of the last such chunk;
  * ITL  = gaps between consecutive content chunks;
  * output tokens = ``usage.completion_tokens`` (we ask for it with ``stream_options.include_usage``), and
    only when the server sends no usage, the number of content chunks.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Literal

import httpx

from jalapeno.metrics import RequestOutcome

Endpoint = Literal["completions", "chat"]


@dataclass(frozen=True)
class BenchRequest:
    """One request of a benchmark workload.

    ``prompt`` is text, or a list of token ids (sent as is to ``/v1/completions``). ``prompt_len`` is the
    workload's intended prompt length in tokens (the server's ``usage.prompt_tokens`` wins when it reports one).
    """

    prompt: str | list[int]
    prompt_len: int
    output_len: int


@dataclass(frozen=True)
class EndpointConfig:
    base_url: str
    model: str
    endpoint: Endpoint = "completions"
    api_key: str | None = None
    ignore_eos: bool = True
    temperature: float = 0.0
    #: per-request timeout in seconds (None = wait forever)
    timeout_s: float | None = 6 * 3600

    @property
    def url(self) -> str:
        base = self.base_url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        return base + ("/completions" if self.endpoint == "completions" else "/chat/completions")

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


def build_payload(cfg: EndpointConfig, req: BenchRequest) -> dict:
    """The JSON body for ``req``; mirrors vLLM's bench client (greedy, streamed, usage requested)."""
    body: dict = {
        "model": cfg.model,
        "max_tokens": req.output_len,
        "temperature": cfg.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if cfg.endpoint == "completions":
        body["prompt"] = req.prompt
    else:
        if not isinstance(req.prompt, str):
            raise TypeError("chat requests need a text prompt (give a tokenizer or a text dataset)")
        body["messages"] = [{"role": "user", "content": req.prompt}]
    return body


def chunk_has_content(data: dict, endpoint: Endpoint) -> bool:
    """True when an SSE chunk carries generated content (what vLLM's client times as a token)."""
    choices = data.get("choices")
    if not choices:
        return False
    c = choices[0]
    if c.get("token_ids"):
        return True
    if endpoint == "completions":
        return bool(c.get("text"))
    delta = c.get("delta") or {}
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"))


async def send_request(
    client: httpx.AsyncClient, cfg: EndpointConfig, req: BenchRequest, *, t0: float = 0.0
) -> RequestOutcome:
    """Send ``req`` streamed and time it. Never raises for server or network errors: they become a failed
    :class:`RequestOutcome` with ``error`` set. ``t0`` is the benchmark's start (``perf_counter``) for
    ``start_s``."""
    out = RequestOutcome(success=False, prompt_tokens=req.prompt_len)
    payload = build_payload(cfg, req)
    itl: list[float] = []
    ttft = 0.0
    last = 0.0
    chunks = 0
    usage_tokens: int | None = None
    st = time.perf_counter()
    out.start_s = st - t0
    try:
        async with client.stream("POST", cfg.url, json=payload, headers=cfg.headers(), timeout=cfg.timeout_s) as resp:
            if resp.status_code != 200:
                body = (await resp.aread()).decode(errors="replace")
                out.error = f"HTTP {resp.status_code}: {_error_message(body)}"
                return out
            async for line in resp.aiter_lines():
                line = line.strip()
                if not line.startswith("data:"):
                    continue  # blank separators, SSE comments (": ping"), event: lines
                data_s = line[5:].strip()
                if data_s == "[DONE]":
                    break
                now = time.perf_counter()
                try:
                    data = json.loads(data_s)
                except json.JSONDecodeError:
                    out.error = f"malformed SSE chunk: {data_s[:80]!r}"
                    return out
                if "error" in data and not data.get("choices"):
                    out.error = f"server error mid-stream: {_error_message(json.dumps(data))}"
                    return out
                if chunk_has_content(data, cfg.endpoint):
                    if chunks == 0:
                        ttft = now - st
                    else:
                        itl.append(now - last)
                    last = now
                    chunks += 1
                usage = data.get("usage")
                if usage:
                    if usage.get("completion_tokens") is not None:
                        usage_tokens = int(usage["completion_tokens"])
                    if usage.get("prompt_tokens"):
                        out.prompt_tokens = int(usage["prompt_tokens"])
    except (httpx.HTTPError, OSError) as exc:
        out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return out
    if chunks == 0:
        out.error = "the stream carried no generated content"
        return out
    out.success = True
    out.ttft_s = ttft
    out.e2el_s = last - st
    out.itl_s = itl
    out.output_tokens = usage_tokens if usage_tokens is not None else chunks
    return out


def _error_message(body: str) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the body itself (one line, shortened)."""
    try:
        data = json.loads(body)
        err = data.get("error", data)
        msg = err.get("message") if isinstance(err, dict) else str(err)
        if msg:
            return str(msg)[:300]
    except (json.JSONDecodeError, AttributeError):
        pass
    return " ".join(body.split())[:300]
