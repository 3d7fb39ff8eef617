"""OpenAI request bodies (the subset we serve) and OpenAI-style errors.

Unknown fields are ignored (clients send ``user``, ``metadata``… freely); fields we cannot honour (``n`` > 1,
``tools``, ``tool_choice``, ``response_format`` other than text, ``best_of`` > 1, ``logprobs``, ``echo``) are
refused with a 400 rather than silently ignored. Types are strict: ``max_tokens: "4"`` or ``true`` is a 400, not
a coerced 4 or 1.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class APIError(Exception):
    """An error answered as ``{"error": {"message", "type", "param", "code"}}`` with ``status``."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool = False


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    model: str
    max_tokens: int | None = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    #: accepted only when off: we do not return log-probabilities or echo prompts, and say so
    logprobs: int | bool | None = None
    echo: bool = False
    #: accepted only at their no-op values (absent, empty, "none", text, 1); anything else is a 400
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    response_format: Any = None
    best_of: int | None = None

    @field_validator("tools", "functions")
    @classmethod
    def _no_tools(cls, v: Any) -> Any:
        if v:
            raise ValueError("tool and function calling are not supported by this server")
        return v

    @field_validator("tool_choice", "function_call")
    @classmethod
    def _no_tool_choice(cls, v: Any) -> Any:
        if v not in (None, "none"):
            raise ValueError("tool and function calling are not supported by this server")
        return v

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, v: Any) -> Any:
        if v is not None and v != {"type": "text"}:
            raise ValueError("only {'type': 'text'} is supported (no JSON mode or schemas)")
        return v

    @field_validator("best_of")
    @classmethod
    def _best_of_one(cls, v: int | None) -> int | None:
        if v not in (None, 1):
            raise ValueError("only best_of=1 is supported")
        return v

    @field_validator("logprobs", "echo")
    @classmethod
    def _unsupported(cls, v: Any) -> Any:
        if v not in (None, False, 0):
            raise ValueError("is not supported by this server")
        return v

    @field_validator("n")
    @classmethod
    def _n_is_one(cls, v: int) -> int:
        if v != 1:
            raise ValueError("only n=1 is supported")
        return v

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> list[str] | None:
        if v is None:
            return None
        stops = [v] if isinstance(v, str) else v
        if any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        if len(stops) > 16:
            raise ValueError("at most 16 stop strings")
        return stops

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Sampling):
    """``POST /v1/completions``. ``prompt`` is text or a list of token ids (one prompt: n=1, batch of 1)."""

    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = 16  # OpenAI's default for completions

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: Any) -> str | list[int]:
        if isinstance(v, list) and v and isinstance(v[0], (str, list)):
            if len(v) != 1:
                raise ValueError("send one prompt per request (batched prompts are not supported)")
            v = v[0]
        if isinstance(v, list) and not v:
            raise ValueError("prompt must not be empty")
        if isinstance(v, list) and any(t < 0 for t in v):
            raise ValueError("token ids must be >= 0")
        return v


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for p in self.content:  # OpenAI content parts: only text parts are served
            if p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise ValueError("only text content parts are supported")
            parts.append(p["text"])
        return "".join(parts)


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None

    @property
    def effective_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


def validation_error(exc: Any) -> APIError:
    """Turn a pydantic ``ValidationError`` / FastAPI ``RequestValidationError`` into one clear 400."""
    errors = exc.errors() if hasattr(exc, "errors") else []
    if not errors:
        return APIError(str(exc).splitlines()[0])
    e = errors[0]
    loc = [str(x) for x in e.get("loc", ()) if x not in ("body",)]
    # drop pydantic's union-branch names (e.g. "str", "list[int]") from the parameter path
    param = ".".join(x for x in loc if not any(c in x for c in "[]") and x not in ("str", "int", "list"))
    kind = e.get("type", "")
    if kind == "missing":
        msg = f"missing required field '{param}'"
    elif kind == "json_invalid":
        return APIError(f"request body is not valid JSON ({e.get('msg', '')})", param=None, code="invalid_json")
    else:
        msg = f"invalid '{param}': {e.get('msg', 'bad value')}" if param else e.get("msg", "invalid request")
        msg = msg.replace("Value error, ", "")
    return APIError(msg, param=param or None, code="invalid_value" if kind != "missing" else "missing_field")
