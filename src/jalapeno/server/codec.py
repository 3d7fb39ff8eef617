"""Text ⇄ tokens for the server: a real tokenizer, or the tokenizer-less placeholder path of the sim backend.

* :class:`TokenizerCodec` wraps any tokenizer with ``encode``/``decode`` (and ``apply_chat_template`` for chat):
  a Hugging Face tokenizer or the GGUF tokenizer of the torch backend. Output text is detokenised
  incrementally (vLLM's prefix/read offsets), holding back bytes of an unfinished UTF-8 character.
* :class:`PlaceholderCodec` (sim): a prompt's length is its token-id count or its whitespace-word count; the
  k-th generated token of a request is the text ``" tok<k>"`` (k from 0), so streams can be checked for lost or
  duplicated tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Detokenizer(Protocol):
    def push(self, new_ids: Sequence[int], num_new: int) -> str:
        """Text for the newly generated tokens (``new_ids`` may be empty on the length-only sim path)."""


class Codec(Protocol):
    #: True when prompts are real token ids (else only their length matters: the sim path)
    has_token_ids: bool
    eos_token_ids: tuple[int, ...]

    def encode(self, text: str) -> list[int]: ...

    def prompt_len(self, text: str) -> int: ...

    def min_prompt_len(self, text: str, limit: int) -> int:
        """A cheap lower bound on ``prompt_len(text)``, exact when below ``limit`` or not (rejects a prompt too
        long for the context before tokenising all of it)."""

    def chat_prompt(self, messages: list[dict[str, str]]) -> str | list[int]: ...

    def detokenizer(self, prompt_ids: Sequence[int] | None) -> Detokenizer: ...


# ---------------------------------------------------------------------------------------------------------
class _PlaceholderDetok:
    __slots__ = ("k",)

    def __init__(self) -> None:
        self.k = 0

    def push(self, new_ids: Sequence[int], num_new: int) -> str:
        n = num_new or len(new_ids)
        text = "".join(f" tok{i}" for i in range(self.k, self.k + n))
        self.k += n
        return text


class PlaceholderCodec:
    """Tokenizer-less path for the simulated backend (no weights, no vocabulary)."""

    has_token_ids = False
    eos_token_ids: tuple[int, ...] = ()

    def encode(self, text: str) -> list[int]:
        return list(range(self.prompt_len(text)))

    def prompt_len(self, text: str) -> int:
        return max(1, len(text.split()))

    def min_prompt_len(self, text: str, limit: int) -> int:
        return len(text.split(None, limit))  # at most limit + 1 words: stops early on a huge prompt

    def chat_prompt(self, messages: list[dict[str, str]]) -> str:
        # a minimal template: one "<role>:" word per message plus its content words
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"

    def detokenizer(self, prompt_ids: Sequence[int] | None) -> _PlaceholderDetok:
        return _PlaceholderDetok()


# ---------------------------------------------------------------------------------------------------------
class _IncrementalDetok:
    """vLLM-style incremental detokenisation: decode a small window so that merges across token boundaries
    (and multi-byte characters split over tokens) come out right."""

    def __init__(self, tok: Any, prompt_ids: Sequence[int] | None, skip_ids: frozenset[int]) -> None:
        self.tok = tok
        self.skip = skip_ids
        ctx = [t for t in list(prompt_ids or [])[-5:] if t not in skip_ids]
        self.ids: list[int] = ctx
        self.prefix = 0
        self.read = len(ctx)

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids)

    def push(self, new_ids: Sequence[int], num_new: int) -> str:
        self.ids.extend(t for t in new_ids if t not in self.skip)
        prefix_text = self._decode(self.ids[self.prefix : self.read])
        new_text = self._decode(self.ids[self.prefix :])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            delta = new_text[len(prefix_text) :]
            self.prefix, self.read = self.read, len(self.ids)
            return delta
        return ""


class TokenizerCodec:
    """A real tokenizer. ``tok`` needs ``encode(text) -> ids`` and ``decode(ids) -> text``; chat needs
    ``apply_chat_template(messages, add_generation_prompt=True, tokenize=False)`` (Hugging Face signature)."""

    has_token_ids = True

    def __init__(self, tok: Any, eos_token_ids: Sequence[int] = (), special_ids: Sequence[int] = ()) -> None:
        self.tok = tok
        eos = list(eos_token_ids)
        if not eos and getattr(tok, "eos_token_id", None) is not None:
            eos = [int(tok.eos_token_id)]
        self.eos_token_ids = tuple(eos)
        specials = set(special_ids) | set(getattr(tok, "all_special_ids", []) or []) | set(eos)
        self._skip = frozenset(int(i) for i in specials)
        self._max_token_bytes: int | None = None

    def encode(self, text: str) -> list[int]:
        try:
            return list(self.tok.encode(text, add_special_tokens=False))
        except TypeError:  # tokenizers without the keyword
            return list(self.tok.encode(text))

    def prompt_len(self, text: str) -> int:
        return len(self.encode(text))

    def min_prompt_len(self, text: str, limit: int) -> int:
        """UTF-8 bytes / the longest token's bytes: no token stands for more bytes than its vocabulary string
        takes in UTF-8 (byte-level BPE and SentencePiece strings spell each byte with one or more bytes)."""
        if self._max_token_bytes is None:
            vocab = getattr(self.tok, "get_vocab", None)
            strings = vocab().keys() if vocab is not None else ()
            self._max_token_bytes = max((len(t.encode("utf-8", "replace")) for t in strings), default=0)
        if not self._max_token_bytes:
            return 0
        return len(text.encode("utf-8", "replace")) // self._max_token_bytes

    def chat_prompt(self, messages: list[dict[str, str]]) -> str | list[int]:
        apply = getattr(self.tok, "apply_chat_template", None)
        if apply is None:
            raise ValueError("this model's tokenizer has no chat template")
        return apply(messages, add_generation_prompt=True, tokenize=False)

    def detokenizer(self, prompt_ids: Sequence[int] | None) -> _IncrementalDetok:
        return _IncrementalDetok(self.tok, prompt_ids, self._skip)


class StopStrings:
    """Cuts generated text at the first stop string to complete (the text before it is kept; it and what
    follows are dropped), whatever the chunking. Streams hold back the last ``len(longest stop) - 1``
    characters, which could be the start of a stop string, until the next text or the end."""

    def __init__(self, stops: Sequence[str] | None) -> None:
        self.stops = [s for s in (stops or []) if s]
        self.keep = max((len(s) for s in self.stops), default=1) - 1
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """Text safe to emit now; sets ``stopped`` when a stop string appeared (it and what follows are cut)."""
        if not self.stops:
            return text
        buf = self.pending + text
        # the stop string that completes first (then the longest of those), as a token-by-token check sees it
        hits = [(i + len(s), i) for s in self.stops if (i := buf.find(s)) >= 0]
        if hits:
            self.stopped = True
            self.pending = ""
            return buf[: min(hits)[1]]
        if self.keep and len(buf) > self.keep:
            self.pending = buf[-self.keep :]
            return buf[: -self.keep]
        if self.keep:
            self.pending = buf
            return ""
        return buf

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out
