"""KV block manager: allocation, all-or-nothing reservation, ref counts, prefix hits, counting mode."""

import pytest

from jalapeno.engine.block_manager import BlockManager
from jalapeno.engine.sequence import Sequence
from jalapeno.errors import ConfigError


def seq(n=None, ids=None):
    return Sequence(ids, prompt_len=n)


def test_reserve_and_free_count_blocks():
    bm = BlockManager(10, 16)
    s = seq(33)
    assert bm.reserve(s, 33)
    assert s.num_blocks == 3 == len(s.block_table) == bm.num_used  # ceil(33/16)
    assert len(set(s.block_table)) == 3
    assert bm.reserve(s, 48) and s.num_blocks == 3  # still fits in 3 blocks
    assert bm.reserve(s, 49) and s.num_blocks == 4
    bm.free(s)
    assert bm.num_used == 0 and s.num_blocks == 0 and s.block_table == []


def test_reserve_is_all_or_nothing():
    bm = BlockManager(4, 16)
    a, b = seq(40), seq(40)
    assert bm.reserve(a, 40)  # 3 blocks
    assert not bm.reserve(b, 40)  # needs 3, 1 free
    assert b.num_blocks == 0 and bm.num_free == 1
    assert bm.reserve(b, 16) and bm.num_free == 0


def test_trim_returns_lookahead_blocks():
    bm = BlockManager(8, 4)
    s = seq(5)
    bm.reserve(s, 13)  # 4 blocks
    bm.trim(s, 6)  # 2 blocks needed
    assert s.num_blocks == 2 == len(s.block_table) and bm.num_used == 2


@pytest.mark.parametrize("track", [True, False])
def test_counting_mode_matches_id_mode(track):
    bm = BlockManager(100, 16, track_ids=track)
    seqs = [seq(10 + 7 * i) for i in range(10)]
    for i, s in enumerate(seqs):
        assert bm.reserve(s, 10 + 7 * i + 3)
    expected = sum(-(-(10 + 7 * i + 3) // 16) for i in range(10))
    assert bm.num_used == expected
    for s in seqs[::2]:
        bm.free(s)
    assert bm.num_used == sum(-(-(10 + 7 * i + 3) // 16) for i in range(1, 10, 2))


def _compute(bm, s):
    """Pretend the prompt was prefilled: blocks reserved, all prompt tokens computed, blocks named."""
    assert bm.reserve(s, s.num_tokens)
    s.num_computed_tokens = s.num_tokens
    bm.register_full_blocks(s)


def test_prefix_cache_shares_and_ref_counts_blocks():
    bm = BlockManager(20, 4, enable_prefix_caching=True)
    a = seq(ids=list(range(10)))  # blocks [0-3] [4-7] [8,9]
    _compute(bm, a)
    b = seq(ids=list(range(8)) + [99, 98, 97])
    hit = bm.match_prefix(b)
    assert hit == 8 and b.num_computed_tokens == 8 and b.num_cached_tokens == 8
    assert b.block_table == a.block_table[:2]
    assert [bm.ref_count[x] for x in b.block_table] == [2, 2]
    used = bm.num_used
    assert bm.reserve(b, b.num_tokens) and bm.num_used == used + 1  # only the tail is new
    bm.free(a)
    assert all(bm.ref_count[x] == 1 for x in b.block_table[:2])
    bm.free(b)
    assert bm.num_used == 0
    # freed blocks keep their content: a third prompt revives them from the free list
    c = seq(ids=list(range(9)))
    assert bm.match_prefix(c) == 8 and bm.num_used == 2


def test_prefix_cache_always_leaves_one_token_to_compute():
    bm = BlockManager(20, 4, enable_prefix_caching=True)
    a = seq(ids=list(range(8)))
    _compute(bm, a)
    b = seq(ids=list(range(8)))
    assert bm.match_prefix(b) == 4  # the second block would cover the last token: recomputed


def test_prefix_cache_misses_on_different_prefix():
    bm = BlockManager(20, 4, enable_prefix_caching=True)
    _compute(bm, seq(ids=list(range(12))))
    assert bm.match_prefix(seq(ids=[1000] + list(range(1, 12)))) == 0


def test_no_prefix_lookup_for_length_only_sequences():
    bm = BlockManager(20, 4, enable_prefix_caching=True)
    assert bm.match_prefix(seq(12)) == 0


def test_bad_sizes_are_config_errors():
    with pytest.raises(ConfigError):
        BlockManager(0, 16)
    with pytest.raises(ConfigError):
        BlockManager(10, 0)


def test_offload_tier_counts_blocks_and_evicts_retained_kv_first():
    """The block manager knows an offload tier only as a capacity: offload keeps a victim's computed tokens,
    restore gives them back; retained (finished) KV is evicted oldest first when an offload needs room."""
    from jalapeno.engine.sequence import Sequence

    bm = BlockManager(10, 16, track_ids=False, offload_blocks=8)
    a, b, c = (Sequence(prompt_len=n) for n in (64, 48, 200))
    for s in (a, b):
        assert bm.reserve(s, s.prompt_len)
        s.num_computed_tokens = s.prompt_len
    a.kv_key = "chain-a"
    bm.retain(a)  # 4 blocks kept under its key
    bm.free(a)
    assert bm.retained == {"chain-a": 64} and bm.offload_free == 4 and bm.num_free == 10 - 3
    assert bm.offload(b)  # 3 blocks fit next to the retained 4
    assert (b.num_blocks, b.num_computed_tokens, b.offloaded_tokens, bm.offload_free) == (0, 48, 48, 1)
    c.num_computed_tokens = 80  # 5 blocks: only by evicting the retained entry
    assert bm.offload(c) and not bm.retained and bm.offload_free == 0
    assert not bm.offload(Sequence(prompt_len=16))  # nothing computed: nothing to keep
    assert bm.reserve(b, 48) and bm.restore(b) == 48 and bm.offload_free == 3 and b.offloaded_tokens == 0
    bm.free(c)  # finished or aborted while offloaded: its tier blocks come back too
    assert bm.offload_free == 8 and bm.loaded_tokens == 48 and bm.num_offloads == 2
