"""Fixed-size KV blocks: reference counts, an LRU free list, and the prefix-cache map.

A block is in exactly one of three states:
  * in use   - ref_count > 0 (some sequence's block table holds it);
  * cached   - ref_count == 0, still carries a hash, sits in the free list and can be
               revived by a prefix-cache hit until it is reallocated;
  * free     - ref_count == 0, no hash, sits in the free list.
The free list is an OrderedDict keyed by block id: O(1) removal from the middle (a cache
hit on a cached free block) and O(1) pops from the front. Allocation takes the front;
freed blocks with a hash go to the back (kept longest), blocks without one to the front
(reused first), so cached blocks are evicted least-recently-freed first.

An optional event sink hears what enters and leaves the prefix cache, as the
events vLLM publishes for the same purpose: a block stored (published under its
hash), a block removed (its cached contents evicted by reuse) and all cleared. The
native adapter hands them to the gateway's router (adapters/native.py). The sink
is called on the engine's thread, under its lock, so it must only hand off.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hash: int
    parent_block_hash: int | None  # None for a sequence's first block
    token_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hash: int


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared


class Block:
    __slots__ = ("block_id", "ref_count", "block_hash", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.block_hash: int | None = None
        # The block's tokens, kept with the hash so that a hash collision is caught by
        # comparing tokens instead of silently reusing someone else's KV.
        self.token_ids: tuple[int, ...] | None = None


class NoFreeBlocksError(RuntimeError):
    pass


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.num_blocks = num_blocks
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._cached: dict[int, Block] = {}  # block hash -> block holding those tokens
        self.event_sink: Callable[[KVCacheEvent], None] | None = None

    # ---- queries -------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Blocks allocatable right now (free plus evictable cached)."""
        return len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    def cached_prefix(self, keys: Iterable[tuple[int, tuple[int, ...]]]) -> list[Block]:
        """The cached blocks for the leading (chain hash, tokens) keys, up to the first miss.
        `keys` is read lazily, so nothing past the first miss is computed."""
        hits: list[Block] = []
        for block_hash, token_ids in keys:
            block = self._cached.get(block_hash)
            if block is None or block.token_ids != token_ids:
                break
            hits.append(block)
        return hits

    # ---- state changes -------------------------------------------------------------

    def allocate(self) -> Block:
        if not self._free:
            raise NoFreeBlocksError("no free KV blocks")
        block_id, _ = self._free.popitem(last=False)
        block = self.blocks[block_id]
        if block.block_hash is not None:
            # Lazy eviction: the cached contents die only when the block is reused.
            if self._cached.get(block.block_hash) is block:
                del self._cached[block.block_hash]
                if self.event_sink is not None:
                    self.event_sink(BlockRemoved(block.block_hash))
            block.block_hash = None
            block.token_ids = None
        block.ref_count = 1
        return block

    def touch(self, block: Block) -> None:
        """Take one more reference (a prefix-cache hit or a fork)."""
        if block.ref_count == 0:
            del self._free[block.block_id]
        block.ref_count += 1

    def free(self, block: Block) -> None:
        block.ref_count -= 1
        assert block.ref_count >= 0, f"block {block.block_id} freed twice"
        if block.ref_count == 0:
            self._free[block.block_id] = None
            if block.block_hash is None:
                self._free.move_to_end(block.block_id, last=False)

    def cache(self, block: Block, block_hash: int, token_ids: tuple[int, ...], parent_hash: int | None = None) -> None:
        """Publish a full block under its chain hash (`parent_hash`: the previous
        block's, for the event). A second block with the same contents is left
        unpublished (block tables stay append-only, no de-duplication)."""
        if block.block_hash is not None or block_hash in self._cached:
            return
        block.block_hash = block_hash
        block.token_ids = token_ids
        self._cached[block_hash] = block
        if self.event_sink is not None:
            self.event_sink(BlockStored(block_hash, parent_hash, token_ids))

    def reset_prefix_cache(self) -> None:
        for block in self._cached.values():
            block.block_hash = None
            block.token_ids = None
        self._cached.clear()
        if self.event_sink is not None:
            self.event_sink(AllBlocksCleared())

    def check_integrity(self) -> None:
        in_use = sum(1 for b in self.blocks if b.ref_count > 0)
        cached_free = 0
        for block in self.blocks:
            assert block.ref_count >= 0, f"block {block.block_id} has a negative ref count"
            is_free = block.block_id in self._free
            assert is_free == (block.ref_count == 0), (
                f"block {block.block_id}: ref_count={block.ref_count} but in free list={is_free}"
            )
            if is_free and block.block_hash is not None:
                cached_free += 1
        free_plain = len(self._free) - cached_free
        assert free_plain + cached_free + in_use == self.num_blocks, "free + cached + in use != total"
        for block_hash, block in self._cached.items():
            assert block.block_hash == block_hash, f"cache map entry for block {block.block_id} is stale"
