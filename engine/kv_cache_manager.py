"""Block tables and automatic prefix caching on top of the block pool.

Full blocks are identified by a chain hash: hash(parent block's hash, block tokens). A
lookup also compares the tokens stored with the block, so a hash collision can only cost
a cache miss, never wrong KV. The cache hit is capped so that at least one prompt token is
always computed (its logits are needed to sample)."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.block_pool import Block, BlockPool
from engine.sequence import Sequence

_ROOT_HASH = hash(("switchyard-kv-root",))


@dataclass(frozen=True, slots=True)
class PrefixCacheHit:
    """The cached full blocks that a sequence's leading tokens match (none on a miss)."""

    blocks: list[Block] = field(default_factory=list)
    num_tokens: int = 0  # the tokens those blocks hold


@dataclass(frozen=True, slots=True)
class BlockCopy:
    """Copy the KV of block `src` into block `dst`."""

    src: int
    dst: int


@dataclass(frozen=True, slots=True)
class ForkResult:
    """How a new choice got the KV its parent computed."""

    # False: the pool had no block for the copy and nothing changed; the child is
    # recomputed (mostly from the prefix cache) instead.
    forked: bool
    # What the model runner must copy: the parent's partly filled last block, if any.
    copies: tuple[BlockCopy, ...] = ()


class KVCacheManager:
    def __init__(self, pool: BlockPool, block_size: int, enable_prefix_caching: bool = True) -> None:
        self.pool = pool
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching

    # ---- hashing -------------------------------------------------------------------

    def _chain(self, hashes: list[int], token_ids: list[int], num_full_blocks: int) -> None:
        """Append the chain hashes of blocks len(hashes)..num_full_blocks-1 to `hashes`."""
        bs = self.block_size
        parent = hashes[-1] if hashes else _ROOT_HASH
        for i in range(len(hashes), num_full_blocks):
            parent = hash((parent, tuple(token_ids[i * bs : (i + 1) * bs])))
            hashes.append(parent)

    def _extend_hashes(self, seq: Sequence, num_full_blocks: int) -> None:
        self._chain(seq.block_hashes, seq.token_ids, num_full_blocks)

    def block_hashes(self, token_ids: list[int]) -> list[int]:
        """The chain hashes of the full blocks of `token_ids`: the names the prefix
        cache (and its events) give those blocks, for a router to match a prompt."""
        hashes: list[int] = []
        self._chain(hashes, token_ids, len(token_ids) // self.block_size)
        return hashes

    # ---- prefix-cache lookup -------------------------------------------------------

    def lookup_prefix(self, seq: Sequence) -> PrefixCacheHit:
        """Longest run of cached full blocks matching the sequence's leading tokens."""
        if not self.enable_prefix_caching or seq.num_computed_tokens:
            return PrefixCacheHit()
        bs = self.block_size
        max_blocks = (seq.num_tokens - 1) // bs  # leave at least one token to compute
        if max_blocks == 0:
            return PrefixCacheHit()
        self._extend_hashes(seq, max_blocks)
        tokens = seq.token_ids
        keys = ((seq.block_hashes[i], tuple(tokens[i * bs : (i + 1) * bs])) for i in range(max_blocks))
        blocks = self.pool.cached_prefix(keys)
        return PrefixCacheHit(blocks, len(blocks) * bs)

    # ---- allocation ----------------------------------------------------------------

    def allocate_slots(self, seq: Sequence, num_new_tokens: int, hit: PrefixCacheHit | None = None) -> bool:
        """Make room for `num_new_tokens` more tokens (after the prefix-cache `hit`, if any).
        Returns False, changing nothing, when the pool cannot supply the blocks: the
        scheduler's signal to preempt or to stop admitting."""
        computed_blocks = hit.blocks if hit is not None else []
        bs = self.block_size
        num_computed = seq.num_computed_tokens + len(computed_blocks) * bs
        blocks_needed = -(-(num_computed + num_new_tokens) // bs)
        num_new_blocks = blocks_needed - len(seq.blocks) - len(computed_blocks)
        # A hit on a cached *free* block takes it out of the free list, so it no longer
        # counts as allocatable.
        revived = sum(1 for b in computed_blocks if b.ref_count == 0)
        if num_new_blocks > self.pool.num_free_blocks - revived:
            return False
        for block in computed_blocks:
            self.pool.touch(block)
            seq.blocks.append(block)
            seq.block_ids.append(block.block_id)
        if computed_blocks:
            seq.num_computed_tokens = num_computed
            seq.num_published_blocks = len(seq.blocks)
        for _ in range(num_new_blocks):
            block = self.pool.allocate()
            seq.blocks.append(block)
            seq.block_ids.append(block.block_id)
        return True

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Publish blocks that became full of computed tokens (prompt and output alike)."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        num_full = seq.num_computed_tokens // bs
        if num_full <= seq.num_published_blocks:
            return
        self._extend_hashes(seq, num_full)
        tokens = seq.token_ids
        for i in range(seq.num_published_blocks, num_full):
            parent = seq.block_hashes[i - 1] if i else None
            self.pool.cache(seq.blocks[i], seq.block_hashes[i], tuple(tokens[i * bs : (i + 1) * bs]), parent)
        seq.num_published_blocks = num_full

    def fork(self, parent: Sequence, child: Sequence) -> ForkResult:
        """Share the parent's computed blocks with a new choice of the same prompt.

        Full blocks are shared by reference count; a partially filled last block is
        copied (the child will write its own tokens there)."""
        bs = self.block_size
        num_full = parent.num_computed_tokens // bs
        partial = parent.num_computed_tokens % bs != 0
        if partial and self.pool.num_free_blocks < 1:
            return ForkResult(forked=False)
        for block in parent.blocks[:num_full]:
            self.pool.touch(block)
            child.blocks.append(block)
            child.block_ids.append(block.block_id)
        child.block_hashes = list(parent.block_hashes[:num_full])
        child.num_published_blocks = min(parent.num_published_blocks, num_full)
        child.num_computed_tokens = parent.num_computed_tokens
        if not partial:
            return ForkResult(forked=True)
        block = self.pool.allocate()
        child.blocks.append(block)
        child.block_ids.append(block.block_id)
        return ForkResult(forked=True, copies=(BlockCopy(parent.block_ids[num_full], block.block_id),))

    def free(self, seq: Sequence) -> None:
        """Release the sequence's blocks, tail first, so a chain's tail is evicted before its
        head. Hashes stay on the blocks: a preempted sequence resumes from the cache."""
        for block in reversed(seq.blocks):
            self.pool.free(block)
        seq.blocks = []
        seq.block_ids = []
        seq.num_published_blocks = 0
        seq.num_computed_tokens = 0

    @property
    def usage(self) -> float:
        return 1.0 - self.pool.num_free_blocks / self.pool.num_blocks
