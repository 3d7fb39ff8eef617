"""The shape of one engine step, aggregated: what the cost model needs to price a step.

The scheduler's batch (a list of prefill chunks and decode sequences) is reduced to a few sums so a step
can be priced in microseconds whatever the batch size. Built by :meth:`StepShape.from_batch` (or
:meth:`from_lists` in tests and the ``roofline`` CLI).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Iterable


def _pairs(chunk: int, prefix: int, window: int | None) -> float:
    """(query, key) pairs of causal attention for ``chunk`` new tokens after ``prefix`` cached ones,
    with keys limited to the last ``window`` positions (inclusive of the query itself) when given."""
    full = chunk * prefix + chunk * (chunk + 1) / 2
    if window is None:
        return full
    # query at absolute position p (0-based) sees min(p + 1, window) keys
    lo, hi = prefix, prefix + chunk  # positions lo..hi-1
    # positions with p + 1 <= window see p + 1 keys; the rest see `window`
    cut = min(max(window - 1, lo), hi)  # positions lo..cut-1 are below the window
    n_small = cut - lo
    small = (lo + 1 + cut) * n_small / 2 if n_small > 0 else 0.0
    return small + (hi - cut) * window


#: True when this module runs compiled (``jalapeno build-native``): :class:`StepShape` is then a native class (no
#: ``__dict__``, fields stored in C) built by its constructor; pure Python writes the instance dict directly
NATIVE: Final = type(_pairs).__name__ != "function"


@dataclass(frozen=True, init=False)
class StepShape:
    """Aggregated description of one step. ``*_window`` sums cap each key range at the sliding window."""

    prefill_tokens: int = 0
    prefill_seqs: int = 0
    #: Σ causal (query, key) pairs over prefill chunks: chunk·prefix + chunk(chunk+1)/2
    prefill_attn_pairs: float = 0.0
    prefill_attn_pairs_window: float = 0.0
    #: Σ KV tokens read by prefill chunks (cached prefix + chunk)
    prefill_kv_tokens: int = 0
    prefill_kv_tokens_window: int = 0
    decode_seqs: int = 0
    #: tokens fed by decode sequences (== decode_seqs, or decode_seqs·(1+k) when verifying k draft tokens)
    decode_tokens: int = 0
    #: Σ context length (keys attended, including the new token) over decode sequences
    decode_ctx_sum: int = 0
    decode_ctx_sum_window: int = 0
    #: number of decode sequences whose context is still below the window (their windowed ctx still grows)
    decode_below_window: int = 0
    #: prefill chunks that start at position 0 (fresh prompts, nothing cached) and their tokens: the CPU torch
    #: backend runs them on the causal flash path even beside decode rows (``perf.model.masked_prefill_pairs``);
    #: 0 when not counted (a step whose every chunk starts at 0 is still known fresh: ``prefill_kv_tokens`` equals
    #: ``prefill_tokens``)
    prefill_fresh_tokens: int = 0
    prefill_fresh_seqs: int = 0

    def __init__(
        self, prefill_tokens: int = 0, prefill_seqs: int = 0, prefill_attn_pairs: float = 0.0,
        prefill_attn_pairs_window: float = 0.0, prefill_kv_tokens: int = 0, prefill_kv_tokens_window: int = 0,
        decode_seqs: int = 0, decode_tokens: int = 0, decode_ctx_sum: int = 0, decode_ctx_sum_window: int = 0,
        decode_below_window: int = 0, prefill_fresh_tokens: int = 0, prefill_fresh_seqs: int = 0,
    ) -> None:
        """The dataclass's constructor, written out (``init=False``): compiled, a native class's field stores (its
        fast constructor: the generated one would set each field through ``object.__setattr__``); pure Python,
        the new frozen instance's dict written directly."""
        if NATIVE:
            self.prefill_tokens = prefill_tokens  # type: ignore[misc]
            self.prefill_seqs = prefill_seqs  # type: ignore[misc]
            self.prefill_attn_pairs = prefill_attn_pairs  # type: ignore[misc]
            self.prefill_attn_pairs_window = prefill_attn_pairs_window  # type: ignore[misc]
            self.prefill_kv_tokens = prefill_kv_tokens  # type: ignore[misc]
            self.prefill_kv_tokens_window = prefill_kv_tokens_window  # type: ignore[misc]
            self.decode_seqs = decode_seqs  # type: ignore[misc]
            self.decode_tokens = decode_tokens  # type: ignore[misc]
            self.decode_ctx_sum = decode_ctx_sum  # type: ignore[misc]
            self.decode_ctx_sum_window = decode_ctx_sum_window  # type: ignore[misc]
            self.decode_below_window = decode_below_window  # type: ignore[misc]
            self.prefill_fresh_tokens = prefill_fresh_tokens  # type: ignore[misc]
            self.prefill_fresh_seqs = prefill_fresh_seqs  # type: ignore[misc]
            return
        d = self.__dict__
        d["prefill_tokens"] = prefill_tokens
        d["prefill_seqs"] = prefill_seqs
        d["prefill_attn_pairs"] = prefill_attn_pairs
        d["prefill_attn_pairs_window"] = prefill_attn_pairs_window
        d["prefill_kv_tokens"] = prefill_kv_tokens
        d["prefill_kv_tokens_window"] = prefill_kv_tokens_window
        d["decode_seqs"] = decode_seqs
        d["decode_tokens"] = decode_tokens
        d["decode_ctx_sum"] = decode_ctx_sum
        d["decode_ctx_sum_window"] = decode_ctx_sum_window
        d["decode_below_window"] = decode_below_window
        d["prefill_fresh_tokens"] = prefill_fresh_tokens
        d["prefill_fresh_seqs"] = prefill_fresh_seqs

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens

    @classmethod
    def of(
        cls, prefill_tokens: int, prefill_seqs: int, prefill_attn_pairs: float, prefill_attn_pairs_window: float,
        prefill_kv_tokens: int, prefill_kv_tokens_window: int, decode_seqs: int, decode_tokens: int,
        decode_ctx_sum: int, decode_ctx_sum_window: int, decode_below_window: int, prefill_fresh_tokens: int = 0,
        prefill_fresh_seqs: int = 0,
    ) -> "StepShape":
        """``StepShape(...)`` with every field given, in field order (the simulator builds one or two shapes per engine
        step). The constructor itself is the fast one now (written out: a native class's field stores compiled, the
        frozen instance's dict written directly in pure Python), so this only keeps the callers' name."""
        return StepShape(prefill_tokens, prefill_seqs, prefill_attn_pairs, prefill_attn_pairs_window, prefill_kv_tokens,
                         prefill_kv_tokens_window, decode_seqs, decode_tokens, decode_ctx_sum, decode_ctx_sum_window,
                         decode_below_window, prefill_fresh_tokens, prefill_fresh_seqs)

    @classmethod
    def from_lists(
        cls,
        prefill: Iterable[tuple[int, int]] = (),
        decode_ctx: Iterable[int] = (),
        window: int | None = None,
        decode_tokens_per_seq: int = 1,
    ) -> "StepShape":
        """``prefill``: (chunk_len, prefix_len) per prefill chunk; ``decode_ctx``: context length per decode
        sequence *including* the token being decoded; ``window``: sliding window of the model (or None)."""
        pt = ps = pkv = pkvw = ft = fs = 0
        pp = ppw = 0.0
        for chunk, prefix in prefill:
            pt += chunk
            ps += 1
            if not prefix:
                ft += chunk
                fs += 1
            pp += _pairs(chunk, prefix, None)
            ppw += _pairs(chunk, prefix, window) if window else _pairs(chunk, prefix, None)
            pkv += prefix + chunk
            pkvw += min(prefix, window) + chunk if window else prefix + chunk
        ds = dsum = dsw = below = 0
        for ctx in decode_ctx:
            ds += 1
            dsum += ctx
            if window:
                dsw += min(ctx, window)
                below += ctx < window
            else:
                dsw += ctx
        return cls(
            prefill_tokens=pt,
            prefill_seqs=ps,
            prefill_attn_pairs=pp,
            prefill_attn_pairs_window=ppw,
            prefill_kv_tokens=pkv,
            prefill_kv_tokens_window=pkvw,
            decode_seqs=ds,
            decode_tokens=ds * decode_tokens_per_seq,
            decode_ctx_sum=dsum,
            decode_ctx_sum_window=dsw,
            decode_below_window=below,
            prefill_fresh_tokens=ft,
            prefill_fresh_seqs=fs,
        )
