"""Paged KV cache and paged attention (PyTorch reference path; Triton decode kernel on CUDA).

Layout: per layer a cache tensor ``[num_blocks, block_size, kv_heads, head_dim]`` for K and one for V (MLA
keeps a single latent tensor whose first ``kv_lora_rank`` dims double as V). A token at position ``p`` of a
sequence lives in block ``block_table[p // block_size]`` at offset ``p % block_size``; its flat *slot* is
``block * block_size + offset``.

:class:`StepMetadata` is built once per engine step from the scheduled chunks and shared by every layer: the
slots the new tokens are written to, and for attention a padded ``[B, max_ctx]`` gather of each sequence's
slots plus a ``[B, max_q, max_ctx]`` visibility mask (causal over the full context, so a chunk of a prefill sees
the cached prefix and itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from jalapeno.backends.torch.elementwise import causal_attention


@dataclass
class SeqSlice:
    """One sequence's part of a step: ``num_tokens`` new tokens at positions ``start..start+num_tokens-1``."""

    start: int
    num_tokens: int
    block_table: list[int]


@dataclass
class StepMetadata:
    positions: torch.Tensor  # [T] int64, absolute position of each fed token
    slot_mapping: torch.Tensor  # [T] int64, flat cache slot each new token's K/V is written to
    query_lens: list[int]
    context_lens: torch.Tensor  # [B] int64, tokens in the cache after this step (incl. the new ones)
    block_tables: torch.Tensor  # [B, max_blocks] int32 (padded with 0)
    gather_slots: torch.Tensor  # [B, max_ctx] int64, slot of each context token (padding -> a valid slot)
    pad_index: torch.Tensor | None  # [T] index of each token in the flattened [B*max_q] padded layout
    max_q: int
    block_size: int
    starts: list[int]  # first fed position of each sequence
    contexts: list[int]  # context_lens as Python ints
    _masks: dict = field(default_factory=dict)
    _groups: list = field(default_factory=list)

    @property
    def is_decode(self) -> bool:
        return self.max_q == 1

    @property
    def is_fresh(self) -> bool:
        """Every sequence starts at position 0 and feeds the same number of tokens (one prompt, or equal-length
        prompts, with nothing cached before them): each one's keys are exactly its own new tokens, so attention
        needs neither the cache gather nor a mask (plain causal attention over the step's own K/V)."""
        return self.pad_index is None and not any(self.starts)

    @property
    def query_pos(self) -> torch.Tensor:
        """``[B, max_q]`` int64 position of each padded query (-1 for padding)."""
        dev = self.gather_slots.device
        starts = torch.tensor(self.starts, dtype=torch.int64, device=dev)[:, None]
        j = torch.arange(self.max_q, dtype=torch.int64, device=dev)[None, :]
        qlens = torch.tensor(self.query_lens, dtype=torch.int64, device=dev)[:, None]
        return torch.where(j < qlens, starts + j, -1)

    @property
    def key_pos(self) -> torch.Tensor:
        """``[B, max_ctx]`` int64 position of each key (a huge value for padding, so no query sees it)."""
        k = torch.arange(self.gather_slots.shape[1], dtype=torch.int64, device=self.gather_slots.device)[None, :]
        return torch.where(k < self.context_lens[:, None], k, torch.iinfo(torch.int64).max // 2)

    def mask(self, window: int | None) -> torch.Tensor:
        """Boolean ``[B, 1, max_q, max_ctx]`` visibility (True = attend), cached per window size."""
        if window not in self._masks:
            q = self.query_pos[:, :, None]
            k = self.key_pos[:, None, :]
            m = k <= q
            if window is not None:
                m &= (q - k) < window
            self._masks[window] = m[:, None]
        return self._masks[window]

    @property
    def mixed_starts(self) -> bool:
        """Prefill chunks of equal length that start at different positions (a fresh prompt beside a later chunk,
        or later chunks after different prefixes): :func:`paged_attention` splits them (:meth:`groups`) so each
        group runs causally (fresh prompts on their own K/V, later chunks over their gathered context)."""
        return self.max_q > 1 and len(set(self.starts)) > 1

    def groups(self) -> list[tuple[torch.Tensor | slice, "StepMetadata"]]:
        """The step's sequences grouped by query length, and prefill chunks also by their first position (fresh
        prompts from 0: nothing cached, so :func:`paged_attention` runs them causally on the step's own K/V; later
        chunks after the same prefix: causally over their gathered context), each group as (its flat query rows, a
        ``slice`` when they are consecutive else an index tensor ``[n]``; its own metadata): attention group by
        group pads no query. Without it a mixed step pads every decode row of one query to the longest prefill
        chunk (7 decode rows beside a 512-token prompt: 8 x 512 queries over the longest context, ~18x the
        attention the step needs). Built once per step, shared by every layer."""
        if not self._groups:
            offsets = [0]
            for n in self.query_lens:
                offsets.append(offsets[-1] + n)
            by_kind: dict[tuple[int, int], list[int]] = {}
            for i, n in enumerate(self.query_lens):
                by_kind.setdefault((n, self.starts[i] if n > 1 else -1), []).append(i)
            self._groups = [self._subset(seqs, offsets) for seqs in by_kind.values()]
        return self._groups

    def _subset(self, seqs: list[int], offsets: list[int]) -> tuple[torch.Tensor | slice, "StepMetadata"]:
        """Flat query rows and metadata of sequences ``seqs`` (equal query lengths: no padding)."""
        dev = self.gather_slots.device
        rows = torch.cat([torch.arange(offsets[i], offsets[i + 1]) for i in seqs]).to(dev)
        idx = torch.tensor(seqs, dtype=torch.int64, device=dev)
        ctx = [self.contexts[i] for i in seqs]
        sub = StepMetadata(
            positions=self.positions[rows], slot_mapping=self.slot_mapping[rows],
            query_lens=[self.query_lens[i] for i in seqs], context_lens=self.context_lens[idx],
            block_tables=self.block_tables[idx], gather_slots=self.gather_slots[idx, : max(ctx)].contiguous(),
            pad_index=None, max_q=self.query_lens[seqs[0]], block_size=self.block_size,
            starts=[self.starts[i] for i in seqs], contexts=ctx,
        )
        if seqs == list(range(seqs[0], seqs[-1] + 1)):  # consecutive sequences: a view, no copy of q/k/v rows
            return slice(offsets[seqs[0]], offsets[seqs[-1] + 1]), sub
        return rows, sub

    @staticmethod
    def build(seqs: list[SeqSlice], block_size: int, device: torch.device) -> "StepMetadata":
        positions: list[int] = []
        slots: list[int] = []
        for s in seqs:
            table = s.block_table
            for p in range(s.start, s.start + s.num_tokens):
                positions.append(p)
                slots.append(table[p // block_size] * block_size + p % block_size)
        qlens = [s.num_tokens for s in seqs]
        ctx = [s.start + s.num_tokens for s in seqs]
        max_q, max_ctx = max(qlens), max(ctx)
        max_blocks = max(len(s.block_table) for s in seqs)
        padded = [s.block_table + [0] * (max_blocks - len(s.block_table)) for s in seqs]
        tables = torch.tensor(padded, dtype=torch.int32)
        # slot of every (sequence, position): block id * block_size + offset; padding lands on valid slots
        # (block 0, or blocks reserved for later tokens) that key_pos masks out
        gather = tables.to(torch.int64)[:, :, None] * block_size + torch.arange(block_size)
        gather = gather.flatten(1)[:, :max_ctx].contiguous()
        pad_index = None
        if any(q != max_q for q in qlens):
            pad_index = torch.cat([torch.arange(n) + i * max_q for i, n in enumerate(qlens)]).to(device)
        return StepMetadata(
            positions=torch.tensor(positions, dtype=torch.int64, device=device),
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            query_lens=qlens,
            context_lens=torch.tensor(ctx, dtype=torch.int64, device=device),
            block_tables=tables.to(device),
            gather_slots=gather.to(device),
            pad_index=pad_index,
            max_q=max_q,
            block_size=block_size,
            starts=[s.start for s in seqs],
            contexts=ctx,
        )


def write_kv(cache: torch.Tensor, slots: torch.Tensor, values: torch.Tensor) -> None:
    """Store ``values [T, heads, dim]`` at flat ``slots [T]`` of ``cache [num_blocks, block_size, heads, dim]``."""
    cache.view(-1, *cache.shape[2:]).index_copy_(0, slots, values.to(cache.dtype))


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: StepMetadata,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
    new_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Attention of the step's queries ``q [T, H, D]`` over the paged cache; returns ``[T, H, Dv]``.

    ``k_cache``/``v_cache`` are ``[num_blocks, block_size, kv_heads, D|Dv]`` (they may be views of one latent
    tensor for MLA). ``window`` limits keys to ``q_pos - k_pos < window``; ``sinks [H]`` adds one learned logit
    per head to the softmax denominator (GPT-OSS). Dispatches to the Triton kernel for CUDA decode.
    ``new_kv``: the step's own keys and values ``[T, kv_heads, D|Dv]`` (already written to the cache); when the
    step is :attr:`StepMetadata.is_fresh` prompts they are the whole context, and attention runs causally on
    them directly (:func:`fresh_prefill_attention`). A mixed step runs group by group (:func:`grouped_attention`):
    fresh prompts so, equal later chunks after one prefix causally over their gathered context
    (:func:`later_chunk_attention`, float32 CPU), decode rows and everything else on the masked path
    (:func:`paged_attention_ref`; sinks, a window shorter than the context, other dtypes and devices).
    """
    if q.is_cuda and meta.is_decode:
        from jalapeno.kernels.paged_attention import paged_decode

        return paged_decode(q, k_cache, v_cache, meta.block_tables, meta.context_lens, scale, window, sinks)
    if new_kv is not None and sinks is None and meta.max_q > 1 and meta.is_fresh:
        if window is None or meta.max_q <= window:  # the window reaches back past position 0: plain causal
            return fresh_prefill_attention(q, new_kv[0], new_kv[1], len(meta.starts), scale)
    if meta.pad_index is not None or meta.mixed_starts:  # mixed query lengths or starts: group by group
        return grouped_attention(q, k_cache, v_cache, meta, scale, window, sinks, new_kv)
    if sinks is None and meta.max_q > 1 and meta.starts[0] and (window is None or meta.contexts[0] <= window):
        out = later_chunk_attention(q, k_cache, v_cache, meta, scale)  # equal chunks after equal prefixes
        if out is not None:
            return out
    return paged_attention_ref(q, k_cache, v_cache, meta, scale, window, sinks)


def fresh_prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: int, scale: float) -> torch.Tensor:
    """Causal attention of ``b`` equal-length prompts fed from position 0 over their own keys: ``q [T, H, D]``,
    ``k [T, kvh, D]``, ``v [T, kvh, Dv]`` -> ``[T, H, Dv]``. No cache gather, no ``[L, L]`` mask: float32 on CPU
    runs the C flash kernel (:func:`~jalapeno.backends.torch.elementwise.causal_attention`: the query heads of a
    KV head stacked into one tile, ≈ 45 % less CPU than SDPA at 512 tokens, docs/performance.md "Prefill, tenth
    session"), anything else SDPA's causal flash kernel; both skip the blocks above the diagonal."""
    fused = causal_attention(q, k, v, b, scale)
    if fused is not None:
        return fused
    t, h, d = q.shape
    n = t // b
    qb, kb, vb = (x.view(b, n, *x.shape[1:]).transpose(1, 2) for x in (q, k, v))  # [b, heads, n, dim]
    out = F.scaled_dot_product_attention(qb, kb, vb, is_causal=True, scale=scale, enable_gqa=h != k.shape[1])
    return out.transpose(1, 2).reshape(t, h, v.shape[-1])


def later_chunk_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: StepMetadata, scale: float
) -> torch.Tensor | None:
    """Causal attention of equal later chunks (each ``max_q`` queries after the same ``starts[0]`` cached tokens)
    over their whole context gathered through the block table, by the C flash kernel with a key offset: the blocks
    above the diagonal are skipped and no ``[chunk, context]`` mask or score matrix is built (the masked SDPA of
    :func:`paged_attention_ref` computes the whole rectangle). None where the kernel does not run (float64/bf16,
    CUDA, no compiler): the caller takes the masked path."""
    from jalapeno.backends.torch.elementwise import causal_attention as kernel

    if q.device.type != "cpu" or q.dtype != torch.float32:
        return None
    k = _gather(k_cache, meta)  # [B, prefix + chunk, kvh, D]: every context equally long
    v = _gather(v_cache, meta)
    return kernel(q, k.flatten(0, 1), v.flatten(0, 1), len(meta.starts), scale, prefix=meta.starts[0])


def grouped_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: StepMetadata,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
    new_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """:func:`paged_attention` of a step with mixed query lengths or starts, one :meth:`StepMetadata.groups` group
    at a time (the decode rows together, prefill chunks by length and first position), so no query is padded to
    the longest. A group of fresh prompts (from position 0, equal lengths) gets its own rows of ``new_kv`` and so
    runs causally on them (:func:`fresh_prefill_attention`, the path a step of fresh prompts alone takes: no cache
    gather, no ``[chunk, context]`` mask); a group of later chunks runs :func:`later_chunk_attention` over its
    gathered context; decode rows keep the paged path."""
    parts = []
    for rows, sub in meta.groups():
        kv = None
        if new_kv is not None and sub.max_q > 1 and not any(sub.starts):
            kv = (new_kv[0][rows], new_kv[1][rows])
        parts.append((rows, paged_attention(q[rows], k_cache, v_cache, sub, scale, window, sinks, kv)))
    out = parts[0][1].new_empty(q.shape[0], *parts[0][1].shape[1:])
    for rows, o in parts:
        if isinstance(rows, slice):
            out[rows] = o
        else:
            out.index_copy_(0, rows, o)
    return out


def paged_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: StepMetadata,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """PyTorch reference: gather each sequence's context through its block table, then masked attention."""
    b, max_q = meta.gather_slots.shape[0], meta.max_q
    t, h, d = q.shape
    kvh, dv = k_cache.shape[2], v_cache.shape[-1]
    if b == 1 and max_q == 1 and sinks is None:
        return _single_decode(q, k_cache, v_cache, meta, scale, window)
    k = _gather(k_cache, meta)
    v = _gather(v_cache, meta)
    if meta.pad_index is None:
        qp = q.view(b, max_q, h, d)
    else:
        qp = q.new_zeros(b * max_q, h, d).index_copy_(0, meta.pad_index, q).view(b, max_q, h, d)
    mask = meta.mask(window)
    qp, k, v = qp.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, L, D]
    if sinks is None:
        out = F.scaled_dot_product_attention(qp, k, v, attn_mask=mask, scale=scale, enable_gqa=h != kvh)
    else:
        out = _attention_with_sinks(qp, k, v, mask, scale, sinks)
    out = out.transpose(1, 2).reshape(b * max_q, h, dv)
    return out if meta.pad_index is None else out[meta.pad_index]


def _single_decode(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: StepMetadata, scale: float,
    window: int | None,
) -> torch.Tensor:
    """One sequence, one new token: it sees its whole context (or the last ``window`` keys), so attention
    needs no mask and no padding. ``q [1, H, D]`` -> ``[1, H, Dv]``."""
    ctx = meta.contexts[0]
    slots = meta.gather_slots[0, :ctx]
    if window is not None and ctx > window:
        slots = slots[ctx - window :]
    k = torch.index_select(k_cache.flatten(0, 1), 0, slots)  # [L, kvh, D]
    v = torch.index_select(v_cache.flatten(0, 1), 0, slots)
    h, kvh = q.shape[1], k.shape[1]
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], scale=scale,
        enable_gqa=h != kvh,
    )  # [1, H, 1, Dv]
    return out[0].transpose(0, 1)


def _gather(cache: torch.Tensor, meta: StepMetadata) -> torch.Tensor:
    """``[B, max_ctx, heads, dim]`` context of every sequence (works for strided views such as MLA's V)."""
    flat = cache.flatten(0, 1)
    slots = meta.gather_slots
    # index_select copies whole rows; ~3x faster than advanced indexing for these small gathers on CPU
    return torch.index_select(flat, 0, slots.view(-1)).view(*slots.shape, *flat.shape[1:])


def _attention_with_sinks(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, sinks: torch.Tensor
) -> torch.Tensor:
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    logits = (q @ k.transpose(-1, -2)) * scale
    logits = logits.masked_fill(~mask, float("-inf"))
    sink = sinks.to(logits.dtype).view(1, -1, 1, 1).expand(*logits.shape[:-1], 1)
    probs = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :-1]
    return probs @ v
