"""Blocks and sequences for the block pool and KV cache manager tests (shared by them)."""

from __future__ import annotations

from collections.abc import Iterable

from engine.block_pool import Block, BlockPool
from engine.kv_cache_manager import KVCacheManager
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence


def manager(num_blocks: int, block_size: int, **options: bool) -> tuple[BlockPool, KVCacheManager]:
    """A pool of `num_blocks` and the KV cache manager over it (`options`: the manager's)."""
    pool = BlockPool(num_blocks)
    return pool, KVCacheManager(pool, block_size=block_size, **options)


def published(pool: BlockPool, block_hash: int, token_ids: tuple[int, ...]) -> Block:
    """A block taken from `pool` and published under `block_hash` for `token_ids` (still held)."""
    block = pool.allocate()
    pool.cache(block, block_hash, token_ids)
    return block


def seq(tokens: Iterable[int], rid: str = "r") -> Sequence:
    return Sequence(rid, 0, list(tokens), SamplingParams())


def computed(kv: KVCacheManager, tokens: Iterable[int], rid: str = "r") -> Sequence:
    """A sequence of `tokens` with slots for all of them, all computed (none published yet)."""
    s = seq(tokens, rid)
    assert kv.allocate_slots(s, s.num_tokens)
    s.num_computed_tokens = s.num_tokens
    return s


def left_in_cache(kv: KVCacheManager, tokens: Iterable[int], rid: str = "r") -> Sequence:
    """A sequence computed, its full blocks published, then freed: those blocks stay
    cached on the free list for a later prompt to hit."""
    s = computed(kv, tokens, rid)
    kv.cache_full_blocks(s)
    kv.free(s)
    return s
