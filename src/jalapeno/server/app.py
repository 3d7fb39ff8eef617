"""The OpenAI-compatible HTTP app over one :class:`~jalapeno.engine.Engine` (any backend).

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions`` (plain or ``stream: true`` SSE),
``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus). With an API key, ``/v1/*`` needs
``Authorization: Bearer <key>``. Every error is an OpenAI-style ``{"error": {...}}`` body, never a traceback.

Streams send one chunk per step that produced text; a chat stream carries ``role`` in the same chunk as the
first content (no early content-free chunk that a client would time as the first token).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from jalapeno.engine.sequence import SamplingParams
from jalapeno.server.async_engine import AsyncEngine, EngineError
from jalapeno.server.codec import Codec, StopStrings
from jalapeno.server.prom import CONTENT_TYPE_LATEST, ServerMetrics
from jalapeno.server.protocol import APIError, ChatCompletionRequest, CompletionRequest, validation_error

log = logging.getLogger("jalapeno.server")


@dataclass
class ServerConfig:
    """What the app serves. ``max_model_len`` bounds prompt + max_tokens (tokens); ``vocab_size`` bounds
    token-id prompts (None = unchecked)."""

    model_name: str
    max_model_len: int
    api_key: str | None = None
    vocab_size: int | None = None
    time_scale: float = 1.0
    owned_by: str = "jalapeno"
    #: request bodies beyond this many bytes are refused with a 413 before they are read in full
    max_request_bytes: int = 16 * 2**20
    #: a request body must arrive in full within this many seconds (else 408)
    body_timeout_s: float = 30.0
    #: host names the Host header may carry (None: any); `jalapeno serve` passes the bound names, so a page
    #: that rebinds its own DNS name to 127.0.0.1 cannot reach a keyless server on loopback
    allowed_hosts: frozenset[str] | None = None


@dataclass
class _Prompt:
    ids: list[int] | None
    length: int


@dataclass
class _Delta:
    text: str
    finish_reason: str | None = None


class _ChunkRenderer:
    """SSE events of one stream, with the constant JSON around the text rendered once (the hot path)."""

    def __init__(self, base: dict, chat: bool) -> None:
        head = "data: " + json.dumps({**base, "choices": []}, separators=(",", ":"))[:-3] + '[{"index":0,'
        self.chat = chat
        self.sent_role = False
        if chat:
            self.first_head = head + '"delta":{"role":"assistant","content":'
            self.head = head + '"delta":{"content":'
            self.close = '},"logprobs":null,"finish_reason":'
        else:
            self.first_head = self.head = head + '"text":'
            self.close = ',"logprobs":null,"finish_reason":'

    def __call__(self, d: _Delta) -> str:
        head = self.head
        if not self.sent_role:
            head, self.sent_role = self.first_head, True
        fin = "null" if d.finish_reason is None else json.dumps(d.finish_reason)
        return f"{head}{json.dumps(d.text)}{self.close}{fin}}}]}}\n\n"


class _Generation:
    """One request's life in the engine, as an async iterator of batches of text deltas. Aborts the engine
    request if the consumer stops early (client gone, stop string hit)."""

    def __init__(
        self,
        app_state: "_State",
        prompt: _Prompt,
        sampling: SamplingParams,
        stops: list[str] | None,
        stop_ids: frozenset[int],
        marks: tuple[float, float] | None = None,
    ) -> None:
        self.s = app_state
        #: (received, tokenised) on the monotonic clock, for the step trace's request records
        self.marks = marks
        self.prompt = prompt
        self.sampling = sampling
        self.stopper = StopStrings(stops)
        self.stop_ids = stop_ids
        self.completion_tokens = 0
        self.finish_reason: str | None = None
        self.t0 = time.perf_counter()
        self.ttft: float | None = None
        self.client_gone = False
        self._q: asyncio.Queue | None = None

    def cancel(self) -> None:
        """The client went away: end :meth:`batches` at its next wait (which aborts the engine request)."""
        self.client_gone = True
        if self._q is not None:
            self._q.put_nowait(_CLIENT_GONE)

    def shut_down(self) -> None:
        """The server is shutting down: end :meth:`batches` with a 503 at its next wait."""
        if self._q is not None:
            self._q.put_nowait(_SHUTDOWN)

    async def batches(self) -> AsyncIterator[list[_Delta]]:
        """Deltas in batches: everything the engine has delivered by the time the consumer asks (one delta per
        engine step, so a stream still carries one event per step; a slow consumer gets them in one write)."""
        s = self.s
        sid, q = s.engine.submit(self.prompt.ids, self.prompt.length, self.sampling, self.marks)
        self._q = q
        detok = s.codec.detokenizer(self.prompt.ids)
        self._done = False
        s.live.add(self)
        try:
            while not self.client_gone:
                items = [await q.get()]
                while not q.empty():
                    items.append(q.get_nowait())
                if self.client_gone:
                    return
                if _SHUTDOWN in items:
                    raise APIError(
                        "the server is shutting down; retry elsewhere", status=503, type="server_error", code="shutdown"
                    )
                out: list[_Delta] = []
                for item in items:
                    d = self._apply(item, sid, detok)
                    if d is not None:
                        out.append(d)
                    if self._done:
                        break
                if self._done:  # account before the last yield: the consumer may not resume us after it
                    s.metrics.observe_request(
                        self.prompt.length,
                        self.completion_tokens,
                        self.ttft,
                        time.perf_counter() - self.t0,
                        self.finish_reason or "stop",
                    )
                    yield out
                    return
                if out:
                    yield out
        finally:
            s.live.discard(self)
            if not self._done:
                s.engine.abort(sid)  # client disconnected / cancelled: free its KV blocks now

    def _apply(self, item, sid, detok) -> _Delta | None:
        if isinstance(item, EngineError):
            self._done = True
            if item.user_error:
                raise APIError(item.message)
            raise APIError(item.message, status=500, type="internal_error", code="engine_error")
        n = item.num_new_tokens or len(item.new_token_ids)
        self.completion_tokens += n
        ids, n_text = item.new_token_ids, n
        if item.finished and item.finish_reason == "stop" and ids and ids[-1] in self.stop_ids:
            ids, n_text = ids[:-1], n - 1  # the stop token itself is not text
        text = self.stopper.feed(detok.push(ids, n_text) if n_text > 0 else "")
        if self.stopper.stopped and not item.finished:
            self.s.engine.abort(sid)
            self._done = True
            self.finish_reason = "stop"
        elif item.finished:
            self._done = True
            if not self.stopper.stopped:
                text += self.stopper.flush()
            self.finish_reason = "stop" if self.stopper.stopped else (item.finish_reason or "stop")
        if text and self.ttft is None:
            self.ttft = time.perf_counter() - self.t0
        if self._done:
            return _Delta(text, self.finish_reason)
        return _Delta(text) if text else None

    def usage(self) -> dict:
        return {
            "prompt_tokens": self.prompt.length,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt.length + self.completion_tokens,
        }


@dataclass
class _State:
    cfg: ServerConfig
    engine: AsyncEngine
    codec: Codec
    metrics: ServerMetrics
    eos_ids: tuple[int, ...] = ()
    #: requests in flight (ended by :meth:`drain` at shutdown)
    live: set = field(default_factory=set)
    shutting_down: bool = False

    def drain(self) -> None:
        """Refuse new requests and end every request in flight with a 'shutting down' error (event loop)."""
        self.shutting_down = True
        for gen in list(self.live):
            gen.shut_down()


def build_app(engine: Any, codec: Codec, cfg: ServerConfig, tracer: Any = None):
    """A FastAPI app serving ``engine`` (a :class:`jalapeno.engine.Engine`); the engine thread starts and stops
    with the app's lifespan. ``tracer``: a :class:`~jalapeno.server.step_trace.StepTracer` recording every step."""
    aeng = AsyncEngine(engine, time_scale=cfg.time_scale, tracer=tracer)
    state = _State(cfg, aeng, codec, ServerMetrics(aeng.stats), tuple(codec.eos_token_ids))
    aeng.on_itl = state.metrics.observe_itl

    @asynccontextmanager
    async def lifespan(_app):
        if tracer is not None:
            import threading

            tracer.loop_tid = threading.get_native_id()  # the event loop's thread (HTTP, detokenise, SSE)
        aeng.start()
        try:
            yield
        finally:
            aeng.stop()

    app = FastAPI(
        title="Jalapeño OpenAI-compatible server", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.jalapeno = state
    if cfg.allowed_hosts is not None:
        app.add_middleware(_HostCheck, allowed=cfg.allowed_hosts)
    _add_error_handlers(app)
    _add_routes(app, state)
    return app


def _error_response(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


def _add_error_handlers(app: FastAPI) -> None:
    """Every error leaves as an OpenAI-style error body."""

    @app.exception_handler(APIError)
    async def _api_error(_req, exc: APIError):
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_req, exc):
        return _error_response(validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req, exc):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return _error_response(APIError(str(exc.detail), status=exc.status_code, type=kind))

    @app.exception_handler(Exception)
    async def _unexpected(_req, exc):
        log.exception("unhandled server error")
        return _error_response(APIError(f"internal error: {type(exc).__name__}", status=500, type="internal_error"))


def _add_routes(app: FastAPI, state: _State) -> None:
    """The OpenAI endpoints, /health and /metrics."""
    cfg, codec, aeng = state.cfg, state.codec, state.engine

    @app.post("/v1/completions")
    async def completions(request: Request):
        t_recv = time.monotonic()
        _check_auth(request, state)
        req: CompletionRequest = await _parse(request, CompletionRequest, cfg)
        prompt = await asyncio.to_thread(_make_prompt, req.prompt, cfg, codec)  # type: ignore[arg-type]
        sp, stop_ids = _sampling_for(req, prompt, req.max_tokens, state)
        gen = _Generation(state, prompt, sp, req.stop, stop_ids, (t_recv, time.monotonic()))  # type: ignore[arg-type]
        return await _respond(request, gen, req.stream, req.include_usage, cfg, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        t_recv = time.monotonic()
        _check_auth(request, state)
        req: ChatCompletionRequest = await _parse(request, ChatCompletionRequest, cfg)
        prompt = await asyncio.to_thread(_chat_prompt, req, cfg, codec)
        sp, stop_ids = _sampling_for(req, prompt, req.effective_max_tokens, state)
        gen = _Generation(state, prompt, sp, req.stop, stop_ids, (t_recv, time.monotonic()))  # type: ignore[arg-type]
        return await _respond(request, gen, req.stream, req.include_usage, cfg, chat=True)

    @app.get("/v1/models")
    async def models(request: Request):
        _check_auth(request, state)
        return {
            "object": "list",
            "data": [
                {
                    "id": cfg.model_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": cfg.owned_by,
                    "max_model_len": cfg.max_model_len,
                }
            ],
        }

    @app.get("/health")
    async def health():
        if not aeng.alive:
            return JSONResponse({"status": "engine stopped"}, status_code=503)
        return {"status": "ok", **aeng.stats()}

    @app.get("/metrics")
    async def metrics():
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _check_auth(request: Request, state: _State) -> None:
    """503 while shutting down; with an API key, 401 unless the request carries it."""
    cfg = state.cfg
    if state.shutting_down:
        raise APIError("the server is shutting down; retry elsewhere", status=503, type="server_error", code="shutdown")
    if not cfg.api_key:
        return
    got = request.headers.get("authorization", "")
    scheme, _, token = got.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), cfg.api_key.encode()):
        raise APIError(
            "invalid or missing API key: send 'Authorization: Bearer <key>'",
            status=401,
            type="authentication_error",
            code="invalid_api_key",
        )


async def _read_body(request: Request, cfg: ServerConfig) -> bytes:
    """The body, refused with a 413 beyond ``cfg.max_request_bytes`` and a 408 after ``cfg.body_timeout_s``."""
    limit = cfg.max_request_bytes
    too_large = APIError(
        f"request body exceeds {limit} bytes (the server's --max-request-bytes)",
        status=413,
        code="request_too_large",
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    buf = bytearray()
    try:
        async with asyncio.timeout(cfg.body_timeout_s):
            async for chunk in request.stream():
                buf += chunk
                if len(buf) > limit:
                    raise too_large
    except TimeoutError:
        raise APIError(
            f"request body not received within {cfg.body_timeout_s:g} s", status=408, code="request_timeout"
        ) from None
    return bytes(buf)



async def _parse(request: Request, model_cls, cfg: ServerConfig):
    data = _load_json(await _read_body(request, cfg))
    if not isinstance(data, dict):
        raise APIError("request body must be a JSON object", code="invalid_json")
    try:
        req = model_cls.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if req.model != cfg.model_name:
        raise APIError(
            f"model '{req.model}' does not exist; this server serves '{cfg.model_name}'",
            status=404,
            type="not_found_error",
            param="model",
            code="model_not_found",
        )
    return req


def _chat_prompt(req: ChatCompletionRequest, cfg: ServerConfig, codec: Codec) -> _Prompt:
    try:
        msgs = [{"role": m.role, "content": m.text()} for m in req.messages]
        rendered = codec.chat_prompt(msgs)
    except ValueError as exc:
        raise APIError(str(exc), param="messages") from None
    return _make_prompt(rendered, cfg, codec)


def _make_prompt(p: str | list[int], cfg: ServerConfig, codec: Codec) -> _Prompt:
    """Token ids (or the length) of a prompt; runs in a worker thread (tokenising is slow)."""
    if isinstance(p, str) and (least := codec.min_prompt_len(p, cfg.max_model_len)) >= cfg.max_model_len:
        raise APIError(
            f"prompt has at least {least} tokens; the context is {cfg.max_model_len}",
            param="prompt",
            code="context_length_exceeded",
        )
    if isinstance(p, list):
        if cfg.vocab_size is not None and max(p) >= cfg.vocab_size:
            raise APIError(f"token id {max(p)} is outside the vocabulary (size {cfg.vocab_size})", param="prompt")
        return _Prompt(list(p) if codec.has_token_ids else None, len(p))
    if codec.has_token_ids:
        ids = codec.encode(p)
        if not ids:
            raise APIError("prompt is empty after tokenisation", param="prompt")
        return _Prompt(ids, len(ids))
    return _Prompt(None, codec.prompt_len(p))


def _sampling_for(req, prompt: _Prompt, max_tokens: int | None, state: _State) -> tuple[SamplingParams, frozenset[int]]:
    cfg = state.cfg
    room = cfg.max_model_len - prompt.length
    if room <= 0:
        raise APIError(
            f"prompt has {prompt.length} tokens; the context is {cfg.max_model_len}",
            param="messages" if isinstance(req, ChatCompletionRequest) else "prompt",
            code="context_length_exceeded",
        )
    if max_tokens is None:
        max_tokens = room
    if max_tokens <= 0:
        raise APIError(f"max_tokens must be >= 1 (got {max_tokens})", param="max_tokens", code="invalid_value")
    if prompt.length + max_tokens > cfg.max_model_len:
        raise APIError(
            f"prompt ({prompt.length} tokens) + max_tokens ({max_tokens}) exceeds the context of "
            f"{cfg.max_model_len} tokens",
            param="max_tokens",
            code="context_length_exceeded",
        )
    user_stop = tuple(req.stop_token_ids or ())
    stop_ids = user_stop + (() if req.ignore_eos else state.eos_ids)
    sp = SamplingParams(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        seed=req.seed,
        stop_token_ids=stop_ids,
        ignore_eos=req.ignore_eos and not user_stop,
    )
    return sp, frozenset(stop_ids)


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def _respond(request: Request, gen: _Generation, stream: bool, include_usage: bool, cfg: ServerConfig,
                   chat: bool):
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    created = int(time.time())
    obj = "chat.completion.chunk" if chat else "text_completion"
    base = {"id": rid, "object": obj, "created": created, "model": cfg.model_name}
    if not stream:
        return await _full_response(request, gen, base, chat)
    return await _stream_response(request, gen, base, include_usage, chat)


async def _full_response(request: Request, gen: _Generation, base: dict, chat: bool) -> Response:
    parts: list[str] = []
    agen = gen.batches()
    watch = asyncio.ensure_future(_watch_disconnect(request, gen))
    try:
        async for batch in agen:
            parts.extend(d.text for d in batch)
    finally:
        watch.cancel()
        await agen.aclose()
    if gen.client_gone:
        return Response(status_code=499)  # nobody is listening
    text = "".join(parts)
    if chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": gen.finish_reason,
        }
        body = {**base, "object": "chat.completion", "choices": [choice]}
    else:
        body = {
            **base,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": gen.finish_reason}],
        }
    body["usage"] = gen.usage()
    return JSONResponse(body)


async def _stream_response(request: Request, gen: _Generation, base: dict, include_usage: bool,
                           chat: bool) -> Response:
    # Validation errors surface before the first byte: pull the first deltas eagerly.
    agen = gen.batches()
    watch = asyncio.ensure_future(_watch_disconnect(request, gen))
    try:
        first = await agen.__anext__()
    except StopAsyncIteration:  # the client left before the first token
        first = None
    finally:
        watch.cancel()
    if first is None or gen.client_gone:
        await agen.aclose()
        return Response(status_code=499)
    render = _ChunkRenderer(base, chat)

    async def body_iter():
        try:
            batch = first
            while batch is not None:
                yield "".join(render(d) for d in batch)  # one write; still one SSE event per step
                if batch and batch[-1].finish_reason is not None:
                    break
                try:
                    batch = await agen.__anext__()
                except StopAsyncIteration:
                    batch = None
            if include_usage:
                yield _sse({**base, "choices": [], "usage": gen.usage()})
            yield "data: [DONE]\n\n"
        except APIError as e:  # engine failed mid-stream: report in-band, as OpenAI does
            yield _sse(e.body())
            yield "data: [DONE]\n\n"
        finally:
            await agen.aclose()

    return StreamingResponse(
        body_iter(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


_CLIENT_GONE = object()
_SHUTDOWN = object()


def host_name(host_header: str) -> str:
    """The name part of a Host header: ``"[::1]:8000"`` → ``"::1"``, ``"Example.com:80"`` → ``"example.com"``."""
    h = host_header.strip().lower()
    if h.startswith("["):
        return h[1 : h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


class _HostCheck:
    """Pure ASGI middleware: a request whose Host header names no allowed host gets an OpenAI-style 400."""

    def __init__(self, app, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = frozenset(a.lower() for a in allowed)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            raw = next((v for k, v in scope["headers"] if k == b"host"), b"")
            name = host_name(raw.decode("latin-1"))
            if name not in self.allowed:
                err = APIError(
                    f"Host '{name}' is not served here (start the server with --allowed-hosts to add it)",
                    code="invalid_host",
                )
                await JSONResponse(err.body(), status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _load_json(raw: bytes) -> Any:
    """The request body as JSON, or a 400: malformed, nested too deep, or holding a lone UTF-16 surrogate
    (``"\\ud800"`` is valid JSON but not text: it could never be tokenised nor sent back)."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(f"request body is not valid JSON ({exc})", code="invalid_json") from None
    except RecursionError:
        raise APIError("request body is nested too deeply", code="invalid_json") from None
    if _SURROGATE_ESCAPE.search(raw):  # rare: only then pay for the exact check
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise APIError(
                "request body holds a lone UTF-16 surrogate (\\ud800-\\udfff not in a pair): send valid text",
                code="invalid_json",
            ) from None
    return data




async def _watch_disconnect(request: Request, gen: _Generation, every_s: float = 0.25) -> None:
    """Until cancelled, poll the connection; when the client has gone, cancel ``gen`` (aborting its request).
    Streams need no watcher once they run: Starlette cancels their body iterator on disconnect."""
    while True:
        await asyncio.sleep(every_s)
        if await request.is_disconnected():
            gen.cancel()
            return
