"""Paged KV-cache blocks: a free list, reference counts and optional prefix caching.

A sequence holding ``n`` tokens of KV owns ``ceil(n / block_size)`` blocks. With prefix caching (real token
ids only) every *full* block is named by a hash chained over all tokens up to its end, so two prompts that
share a prefix share its blocks (reference counted); freed blocks keep their hash until reused, and a later
prompt with the same prefix revives them (nano-vllm / vLLM style).

Simulation needs block *counts*, never ids: with ``track_ids=False`` only counters move (O(1) per call).

An offload tier (``offload_blocks`` > 0: host DRAM or SSD, known here only as a capacity) takes a preempted
sequence's computed KV instead of dropping it (:meth:`offload`); it comes back at readmission
(:meth:`restore`), and the backend prices the transfer. It also keeps a finished sequence's KV under its
``kv_key`` (:meth:`retain`, LMCache-style) for a later request with the same key whose prompt extends it
(:meth:`match_retained`); retained entries are evicted oldest first when an offload needs their room.
"""

from __future__ import annotations

from collections import OrderedDict

from jalapeno.engine.sequence import Sequence
from jalapeno.errors import ConfigError


def _chain_hash(prev: int, tokens: tuple[int, ...]) -> int:
    return hash((prev, tokens))


class BlockManager:
    """KV blocks of ``block_size`` tokens, ``num_blocks`` of them.

    ``reserve(seq, n)`` makes ``seq`` hold room for ``n`` tokens (all-or-nothing); ``free(seq)`` releases
    its blocks; ``trim(seq, n)`` returns blocks beyond ``n`` tokens (speculative lookahead)."""

    def __init__(
        self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = False, track_ids: bool = True,
        offload_blocks: int = 0,
    ) -> None:
        if block_size < 1:
            raise ConfigError(f"block_size must be >= 1 (got {block_size})")
        if num_blocks < 1:
            raise ConfigError(f"no KV blocks: the KV cache has room for {num_blocks} blocks of {block_size} tokens")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.prefix_caching = enable_prefix_caching
        self.track_ids = track_ids or enable_prefix_caching
        self.num_free = num_blocks
        if self.track_ids:
            self.ref_count = [0] * num_blocks
            self.block_hash: list[int | None] = [None] * num_blocks
            self.block_tokens: list[tuple[int, ...] | None] = [None] * num_blocks
            #: free block ids in eviction order (oldest first); a cached block may be revived from here
            self.free_ids: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
            self.hash_to_block: dict[int, int] = {}
            #: per sequence: (full blocks already named, hash of the last one), so naming is incremental
            self._named: dict[int | str, tuple[int, int]] = {}
        #: the offload tier's capacity and free blocks (0: no tier)
        self.offload_blocks = max(0, int(offload_blocks))
        self.offload_free = self.offload_blocks
        self.num_offloads = 0  # sequences offloaded, over the engine's life
        #: finished sequences' KV kept in the offload tier: kv_key -> tokens (oldest first)
        self.retained: OrderedDict[object, int] = OrderedDict()
        self.reused_tokens = 0  # prompt tokens served from retained KV, over the engine's life
        self.loaded_tokens = 0  # KV tokens brought back from the offload tier, over the engine's life
        self.prefix_hits = 0  # tokens served from the prefix cache, over the engine's life
        self.prefix_queries = 0  # prompt tokens looked up

    # --- counters ----------------------------------------------------------------------------------
    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def usage(self) -> float:
        return self.num_used / self.num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        """Extra blocks ``seq`` needs to hold ``num_tokens`` tokens."""
        return max(0, -(-num_tokens // self.block_size) - seq.num_blocks)

    # --- allocation --------------------------------------------------------------------------------
    def _take(self) -> int:
        bid, _ = self.free_ids.popitem(last=False)
        h = self.block_hash[bid]
        if h is not None:  # evict its cached content
            if self.hash_to_block.get(h) == bid:
                del self.hash_to_block[h]
            self.block_hash[bid] = None
            self.block_tokens[bid] = None
        self.ref_count[bid] = 1
        return bid

    def reserve(self, seq: Sequence, num_tokens: int) -> bool:
        """Make ``seq`` hold blocks for ``num_tokens`` tokens. False (and nothing allocated) if too few free."""
        need = -(-num_tokens // self.block_size) - seq.num_blocks
        if need <= 0:
            return True
        if need > self.num_free:
            return False
        self.num_free -= need
        seq.num_blocks += need
        if self.track_ids:
            take = self._take
            seq.block_table.extend(take() for _ in range(need))
        return True

    def take(self, n: int) -> None:
        """Counting mode: ``n`` blocks go to sequences whose block counts are kept elsewhere (a lockstep group)."""
        assert not self.track_ids and n <= self.num_free
        self.num_free -= n

    def give(self, n: int) -> None:
        """Counting mode: ``n`` blocks come back from such sequences."""
        self.num_free += n

    def reserve_chunks(self, chunks, extra_tokens: int, *, known_to_fit: bool = False, slacks=None) -> bool:
        """All-or-nothing :meth:`reserve` of ``chunk.start + chunk.num_tokens + extra_tokens`` tokens for every
        chunk's sequence (a multi-step batch's look-ahead). ``known_to_fit`` skips the counting pass.
        ``slacks`` (counting mode): each chunk's ``num_blocks·block_size − start − num_tokens``, when the caller
        has them; a chunk then takes ``ceil((extra − slack) / block_size)`` blocks if that is positive."""
        bs = self.block_size
        if slacks is not None and known_to_fit and not self.track_ids:
            x = extra_tokens
            took = 0
            for c, sl in zip(chunks, slacks):
                if sl < x:
                    nb = -((sl - x) // bs)
                    c.seq.num_blocks += nb
                    took += nb
            self.num_free -= took
            return True
        if not known_to_fit:
            need = 0
            for c in chunks:
                x = -(-(c.start + c.num_tokens + extra_tokens) // bs) - c.seq.num_blocks
                if x > 0:
                    need += x
            if need > self.num_free:
                return False
        if self.track_ids:
            for c in chunks:
                self.reserve(c.seq, c.start + c.num_tokens + extra_tokens)
            return True
        took = 0
        for c in chunks:
            seq = c.seq
            nb = -(-(c.start + c.num_tokens + extra_tokens) // bs)
            if nb > seq.num_blocks:
                took += nb - seq.num_blocks
                seq.num_blocks = nb
        self.num_free -= took
        return True

    def _release(self, bid: int) -> None:
        self.ref_count[bid] -= 1
        if self.ref_count[bid] == 0:
            self.free_ids[bid] = None
            self.num_free += 1

    def offload(self, seq: Sequence) -> bool:
        """Preemption with an offload tier: move ``seq``'s computed KV (``num_computed_tokens``) to the tier and
        release its blocks here; its computed tokens are kept. False (nothing done) when the tier lacks room."""
        n = seq.num_computed_tokens
        need = -(-n // self.block_size)
        if not n or not self._room(need):
            return False
        self.free(seq)
        seq.num_computed_tokens = n
        seq.offloaded_tokens = n
        self.offload_free -= need
        self.num_offloads += 1
        return True

    def _room(self, need: int) -> bool:
        """Make ``need`` offload-tier blocks free, evicting retained KV oldest first. False if it cannot."""
        bs = self.block_size
        if need > self.offload_free + sum(-(-t // bs) for t in self.retained.values()):
            return False
        while need > self.offload_free:
            _, t = self.retained.popitem(last=False)
            self.offload_free += -(-t // bs)
        return True

    def retain(self, seq: Sequence) -> None:
        """When ``seq`` finishes: keep its computed KV in the offload tier under ``seq.kv_key`` (replacing an
        older entry of that key), if the tier has room without evicting offloaded sequences."""
        key, n = seq.kv_key, seq.num_computed_tokens
        if key is None or not self.offload_blocks or not n:
            return
        old = self.retained.pop(key, None)
        if old:
            self.offload_free += -(-old // self.block_size)
        if self._room(-(-n // self.block_size)):
            self.offload_free -= -(-n // self.block_size)
            self.retained[key] = n

    def match_retained(self, seq: Sequence) -> int:
        """At admission: a waiting ``seq`` whose ``kv_key`` has retained KV takes it over as its own offloaded
        prefix (at most ``prompt_len - 1`` tokens: one is left to compute). Returns the tokens reused."""
        t = self.retained.pop(seq.kv_key, None) if seq.kv_key is not None else None
        if not t:
            return 0
        n = min(t, seq.prompt_len - 1)
        bs = self.block_size
        self.offload_free += -(-t // bs) - -(-n // bs)
        if n:
            seq.num_computed_tokens = n
            seq.offloaded_tokens = n
            self.reused_tokens += n
        return n

    def restore(self, seq: Sequence) -> int:
        """At readmission (``seq`` already holds blocks for its tokens here): release its offload-tier blocks.
        Returns the KV tokens brought back (the backend prices their transfer)."""
        n = seq.offloaded_tokens
        if n:
            self.offload_free += -(-n // self.block_size)
            seq.offloaded_tokens = 0
            self.loaded_tokens += n
        return n

    def free(self, seq: Sequence) -> None:
        """Release every block of ``seq`` (newest first, so a cached prefix's tail is evicted first), and its
        offload-tier copy if it has one (a sequence aborted or finished while offloaded)."""
        if seq.offloaded_tokens:
            self.offload_free += -(-seq.offloaded_tokens // self.block_size)
            seq.offloaded_tokens = 0
        if self.track_ids:
            for bid in reversed(seq.block_table):
                self._release(bid)
            seq.block_table = []
            self._named.pop(seq.seq_id, None)
        else:
            self.num_free += seq.num_blocks
        seq.num_blocks = 0
        seq.num_cached_tokens = 0

    def trim(self, seq: Sequence, num_tokens: int) -> None:
        """Return blocks beyond what ``num_tokens`` tokens need (e.g. rejected speculative slots)."""
        keep = -(-num_tokens // self.block_size)
        extra = seq.num_blocks - keep
        if extra <= 0:
            return
        if self.track_ids:
            for bid in reversed(seq.block_table[keep:]):
                self._release(bid)
            del seq.block_table[keep:]
        else:
            self.num_free += extra
        seq.num_blocks = keep

    # --- prefix caching ----------------------------------------------------------------------------
    def match_prefix(self, seq: Sequence) -> int:
        """At admission: share the cached blocks that hold a prefix of ``seq``'s tokens. Returns the number of
        tokens found; ``seq.num_computed_tokens`` moves past them. At least one token is always left to
        compute (its logits are needed), so a full hit stops one block short."""
        if not (self.prefix_caching and seq.has_token_ids) or seq.num_blocks or seq.num_computed_tokens:
            return 0
        ids = seq.token_ids
        bs = self.block_size
        max_full = (len(ids) - 1) // bs
        self.prefix_queries += len(ids)
        h = 0
        hits: list[int] = []
        for b in range(max_full):
            toks = tuple(ids[b * bs : (b + 1) * bs])
            hb = _chain_hash(h, toks)
            bid = self.hash_to_block.get(hb)
            if bid is None or self.block_tokens[bid] != toks:
                break
            h = hb
            hits.append(bid)
        for bid in hits:
            if self.ref_count[bid] == 0:
                del self.free_ids[bid]
                self.num_free -= 1
            self.ref_count[bid] += 1
        seq.block_table = hits
        seq.num_blocks = len(hits)
        n = len(hits) * bs
        if hits:
            self._named[seq.seq_id] = (len(hits), h)
        seq.num_computed_tokens = n
        seq.num_cached_tokens = n
        self.prefix_hits += n
        return n

    def register_full_blocks(self, seq: Sequence) -> None:
        """After a step: name every newly *computed* full block of ``seq`` so later prompts can share it."""
        if not (self.prefix_caching and seq.has_token_ids):
            return
        bs = self.block_size
        full = min(seq.num_computed_tokens // bs, seq.num_blocks)
        if full == 0:
            return
        done, h = self._named.get(seq.seq_id, (0, 0))
        if full <= done:
            return
        ids = seq.token_ids
        for b in range(done, full):
            toks = tuple(ids[b * bs : (b + 1) * bs])
            h = _chain_hash(h, toks)
            bid = seq.block_table[b]
            if self.block_hash[bid] is None:
                self.block_hash[bid] = h
                self.block_tokens[bid] = toks
                self.hash_to_block.setdefault(h, bid)
        self._named[seq.seq_id] = (full, h)
