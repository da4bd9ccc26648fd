"""The block pool's states and the prefix-cache bookkeeping around them, one rule
at a time: the smallest pool, an empty pool refusing, a reference taken on a block
in use, a second block with the same contents left unpublished, a reset, the
integrity check's own findings, and the KV cache manager's hashing, lookups,
usage and release."""

from __future__ import annotations

import pytest

from engine.block_pool import AllBlocksCleared, BlockPool, BlockStored, NoFreeBlocksError
from engine.kv_cache_manager import KVCacheManager, PrefixCacheHit
from tests.engine.kv_kit import computed, left_in_cache, manager, published, seq


def test_a_pool_of_one_block_works_and_an_empty_one_is_refused():
    pool = BlockPool(1)
    assert pool.allocate().block_id == 0
    with pytest.raises(NoFreeBlocksError, match="^no free KV blocks$"):
        pool.allocate()
    with pytest.raises(ValueError, match="^the KV cache needs at least one block$"):
        BlockPool(0)


def test_a_fresh_pool_hands_blocks_out_in_id_order():
    pool = BlockPool(3)
    assert [pool.allocate().block_id for _ in range(3)] == [0, 1, 2]
    assert pool.num_free_blocks == 0


def test_touching_a_block_in_use_adds_a_reference_and_leaves_the_free_list():
    pool = BlockPool(3)
    b = pool.allocate()
    pool.touch(b)
    assert b.ref_count == 2 and pool.num_free_blocks == 2
    pool.free(b)
    assert b.ref_count == 1 and pool.num_free_blocks == 2  # still held once
    pool.free(b)
    assert b.ref_count == 0 and pool.num_free_blocks == 3
    pool.check_integrity()


def test_freeing_a_block_twice_is_caught():
    pool = BlockPool(1)
    b = pool.allocate()
    pool.free(b)
    with pytest.raises(AssertionError, match="freed twice"):
        pool.free(b)


def test_a_second_block_with_the_same_contents_is_left_unpublished():
    pool = BlockPool(3)
    events: list = []
    pool.event_sink = events.append
    first, second = pool.allocate(), pool.allocate()
    pool.cache(first, 9, (1, 2), parent_hash=4)
    pool.cache(second, 9, (1, 2), parent_hash=4)
    assert second.block_hash is None and second.token_ids is None
    assert pool.num_cached_blocks == 1 and events == [BlockStored(9, 4, (1, 2))]
    pool.cache(first, 10, (3,))  # a published block keeps its first name
    assert first.block_hash == 9 and pool.num_cached_blocks == 1 and len(events) == 1


def test_publishing_without_a_sink_is_silent_and_still_cached():
    pool = BlockPool(2)
    b = published(pool, 1, (5,))
    pool.free(b)
    assert pool.num_cached_blocks == 1
    pool.reset_prefix_cache()
    assert pool.num_cached_blocks == 0


def test_a_reset_forgets_every_cached_block_and_says_so():
    pool = BlockPool(3)
    events: list = []
    pool.event_sink = events.append
    blocks = [pool.allocate() for _ in range(2)]
    pool.cache(blocks[0], 1, (1,))
    pool.cache(blocks[1], 2, (2,), parent_hash=1)
    pool.free(blocks[1])
    events.clear()
    pool.reset_prefix_cache()
    assert events == [AllBlocksCleared()]
    assert pool.num_cached_blocks == 0 and pool.cached_prefix([(1, (1,))]) == []
    assert all(b.block_hash is None and b.token_ids is None for b in blocks)
    # reusing a block that was cached before the reset evicts nothing more
    pool.allocate()
    pool.allocate()
    assert events == [AllBlocksCleared()]
    pool.check_integrity()


def test_the_integrity_check_finds_a_negative_count_and_a_stale_cache_entry():
    pool = BlockPool(2)
    b = published(pool, 5, (1,))
    pool.check_integrity()
    b.block_hash = 6  # the map still names it under 5
    with pytest.raises(AssertionError, match="stale"):
        pool.check_integrity()
    b.block_hash = 5
    pool.free(b)
    b.ref_count = -1
    with pytest.raises(AssertionError, match="negative ref count"):
        pool.check_integrity()


def test_the_integrity_check_counts_free_cached_and_used_blocks_to_the_total():
    pool = BlockPool(4)
    used, cached = pool.allocate(), pool.allocate()
    pool.cache(cached, 1, (1,))
    pool.free(cached)
    pool.check_integrity()  # 2 free, 1 cached free, 1 used
    assert used.ref_count == 1
    pool.blocks.append(pool.blocks[0].__class__(4))  # a block the counts do not know
    pool.blocks[-1].ref_count = 1
    with pytest.raises(AssertionError, match="total"):
        pool.check_integrity()


def test_block_hashes_chain_each_full_block_to_the_previous_one():
    kv = KVCacheManager(BlockPool(4), block_size=2)
    hashes = kv.block_hashes([1, 2, 3, 4, 5])
    assert len(hashes) == 2  # the fifth token fills no block
    assert kv.block_hashes([1, 2, 3, 4]) == hashes
    assert kv.block_hashes([9, 9, 3, 4])[1] != hashes[1]  # same tokens, other parent
    assert kv.block_hashes([1, 2])[0] == hashes[0]
    assert kv.block_hashes([1]) == []


def test_lookup_finds_nothing_with_caching_off_or_once_computing_began():
    pool, kv = manager(8, 2)
    left_in_cache(kv, range(6))
    b = seq(range(6), "b")
    assert kv.lookup_prefix(b).num_tokens == 4
    b.num_computed_tokens = 1
    assert kv.lookup_prefix(b) == PrefixCacheHit()
    off = KVCacheManager(pool, block_size=2, enable_prefix_caching=False)
    assert off.lookup_prefix(seq(range(6), "c")) == PrefixCacheHit()


def test_with_caching_off_full_blocks_are_never_published():
    pool, kv = manager(4, 2, enable_prefix_caching=False)
    a = computed(kv, range(4))
    kv.cache_full_blocks(a)
    assert pool.num_cached_blocks == 0 and a.num_published_blocks == 0


def test_blocks_are_published_as_they_fill_each_naming_its_parent():
    pool = BlockPool(4)
    events: list = []
    pool.event_sink = events.append
    kv = KVCacheManager(pool, block_size=2)
    a = seq(range(5))
    assert kv.allocate_slots(a, 5)
    a.num_computed_tokens = 3
    kv.cache_full_blocks(a)
    a.num_computed_tokens = 5
    kv.cache_full_blocks(a)
    h = kv.block_hashes(list(range(5)))
    assert events == [BlockStored(h[0], None, (0, 1)), BlockStored(h[1], h[0], (2, 3))]
    assert a.num_published_blocks == 2
    kv.cache_full_blocks(a)  # nothing new filled: nothing published again
    assert len(events) == 2


def test_a_hit_on_cached_free_blocks_counts_them_as_taken():
    pool, kv = manager(3, 2)
    left_in_cache(kv, range(5))  # three blocks
    b = seq(list(range(4)) + [7, 8], "b")
    hit = kv.lookup_prefix(b)
    assert hit.num_tokens == 4
    # the two revived blocks leave one allocatable: enough for the 2 new tokens, not 3
    assert not kv.allocate_slots(b, 4, hit)
    assert b.blocks == [] and b.num_computed_tokens == 0 and pool.num_free_blocks == 3
    assert kv.allocate_slots(b, 2, hit)
    assert b.num_computed_tokens == 4 and b.num_published_blocks == 2 and len(b.blocks) == 3
    assert pool.num_free_blocks == 0
    pool.check_integrity()


def test_allocation_without_a_hit_keeps_the_published_count():
    kv = KVCacheManager(BlockPool(4), block_size=2)
    a = seq(range(3))
    assert kv.allocate_slots(a, 3)
    assert a.num_published_blocks == 0 and a.num_computed_tokens == 0 and len(a.blocks) == 2


def test_usage_is_the_share_of_blocks_not_allocatable():
    pool, kv = manager(4, 2)
    assert kv.usage == 0.0
    pool.allocate()
    assert kv.usage == 0.25


def test_freeing_a_sequence_resets_its_block_bookkeeping():
    pool, kv = manager(4, 2)
    a = left_in_cache(kv, range(4))
    assert (a.blocks, a.block_ids, a.num_published_blocks, a.num_computed_tokens) == ([], [], 0, 0)
    assert pool.num_free_blocks == 4 and pool.num_cached_blocks == 2


def test_a_fork_shares_only_what_the_parent_published():
    pool, kv = manager(8, 2)
    parent = seq(range(6))
    assert kv.allocate_slots(parent, 6)
    parent.num_computed_tokens = 4
    kv.cache_full_blocks(parent)  # two blocks published
    parent.num_computed_tokens = 6  # the third filled but not yet published
    child = seq(range(6), "c")
    assert kv.fork(parent, child).forked
    assert child.num_published_blocks == 2 and child.block_hashes == parent.block_hashes[:3]
    assert child.num_computed_tokens == 6 and child.block_ids == parent.block_ids


def test_a_reused_block_can_be_published_under_its_new_contents():
    pool = BlockPool(1)
    events: list = []
    pool.event_sink = events.append
    b = published(pool, 1, (1,))
    pool.free(b)
    again = pool.allocate()  # evicts the cached contents
    assert again is b and b.block_hash is None and b.token_ids is None
    pool.cache(again, 2, (2,))
    assert pool.cached_prefix([(2, (2,))]) == [b] and pool.num_cached_blocks == 1
    assert [type(e).__name__ for e in events] == ["BlockStored", "BlockRemoved", "BlockStored"]


def test_a_fork_with_exactly_one_free_block_copies_into_it():
    pool, kv = manager(4, 4)
    parent = computed(kv, range(10))  # three blocks, the last partly filled
    child = seq(range(10), "c")
    fork = kv.fork(parent, child)
    assert fork.forked and len(fork.copies) == 1 and pool.num_free_blocks == 0
