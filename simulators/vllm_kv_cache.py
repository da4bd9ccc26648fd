"""The vLLM double's prefix cache: a bounded pool of 16-token blocks named by vLLM's
block hashes (simulators/vllm_kv_hash.py), evicted in the order vLLM's v1 block pool
evicts them, and announced as vLLM's KV-cache events.

What vLLM does (`vllm/v1/core/block_pool.py`, `FreeKVCacheBlockQueue` in
`vllm/v1/core/kv_cache_utils.py`): `--num-gpu-blocks-override N` makes a pool of N
blocks, one of which is kept aside as the null block, so N - 1 hold tokens. Blocks
no running request uses sit in a free queue in eviction order: least recently used
first and, among the blocks one request frees together, its last block first (a
request's blocks are freed in reverse order), so a chain loses its leaves before its
root. A new allocation takes blocks from the front of that queue; a taken block that
still had a hash leaves the cache then (one `BlockRemoved` per block). Newly computed
full blocks enter the cache with one `BlockStored` for the request (their hashes,
the parent hash of the block before them or None, their token ids), after the
removals its allocation caused. A cache hit takes the hit blocks out of the free
queue; they go back to its tail when the request frees them.

The double keeps one entry per hash in one queue, least recently used first. A
request's blocks are in use only while its prefill runs (then nothing can evict
them); when the prefill ends they are allocated, stored and at once put back at the
tail, leaf first. vLLM keeps them until the request finishes; the difference is the
decode time of running requests, which the double does not model.

Hit accounting is the toy cache's (simulators/prefix_cache.py): a lookup counts
the prompt's tokens as queried and its leading cached full blocks as hit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from simulators.vllm_kv_hash import BLOCK_SIZE, chain, external

MEDIUM_GPU = "GPU"
DEFAULT_CAPACITY = 65536  # without --num-gpu-blocks-override: the toy cache's bound

Event = dict[str, Any]


class VllmBlockCache:
    def __init__(self, capacity: int = DEFAULT_CAPACITY, publish: Callable[[list[Event]], None] | None = None) -> None:
        self.capacity = max(0, capacity)
        self.block_size = BLOCK_SIZE
        self.publish = publish  # receives the events of one step (one batch), if anyone listens
        self._blocks: OrderedDict[bytes, None] = OrderedDict()  # front: evicted first
        self.queries = 0  # prompt tokens looked up
        self.hits = 0  # prompt tokens found cached
        self.evicted = 0  # blocks evicted so far

    @classmethod
    def from_override(
        cls, num_gpu_blocks: int | None, publish: Callable[[list[Event]], None] | None = None
    ) -> VllmBlockCache:
        """`--num-gpu-blocks-override N`: N blocks, less vLLM's null block."""
        return cls(DEFAULT_CAPACITY if num_gpu_blocks is None else num_gpu_blocks - 1, publish)

    def hashes(self, token_ids: Sequence[int]) -> list[bytes]:
        return chain(token_ids, self.block_size)

    def cached_blocks(self, digests: Sequence[bytes]) -> int:
        n = 0
        for digest in digests:
            if digest not in self._blocks:
                break
            n += 1
        return n

    def lookup(self, token_ids: Sequence[int], digests: Sequence[bytes]) -> int:
        """Leading prompt tokens cached now (whole blocks), counted as a query."""
        cached = self.cached_blocks(digests) * self.block_size
        self.queries += len(token_ids)
        self.hits += cached
        return cached

    def commit(self, token_ids: Sequence[int], digests: Sequence[bytes]) -> None:
        """The prompt's prefill ended: its full blocks are cached (evicting the least
        recently used others), touched as most recent, and announced as one step."""
        keep = list(digests[: self.capacity])  # a prompt larger than the pool caches what fits
        first = self.cached_blocks(keep)
        pinned = set(keep)
        arriving = sum(1 for d in keep[first:] if d not in self._blocks)
        events: list[Event] = []
        excess = len(self._blocks) + arriving - self.capacity
        skipped: list[bytes] = []
        while excess > 0 and self._blocks:
            digest, _ = self._blocks.popitem(last=False)
            if digest in pinned:  # this request's own hit blocks are in use
                skipped.append(digest)
                continue
            excess -= 1
            self.evicted += 1
            events.append({"type": "BlockRemoved", "block_hashes": [external(digest)], "medium": MEDIUM_GPU})
        for digest in reversed(skipped):
            self._blocks[digest] = None
            self._blocks.move_to_end(digest, last=False)
        for digest in reversed(keep):  # the request frees its blocks last one first
            self._blocks[digest] = None
            self._blocks.move_to_end(digest)
        if first < len(keep):
            stored = keep[first:]
            size = self.block_size
            events.append(
                {
                    "type": "BlockStored",
                    "block_hashes": [external(d) for d in stored],
                    "parent_block_hash": external(keep[first - 1]) if first else None,
                    "token_ids": list(token_ids[first * size : len(keep) * size]),
                    "block_size": size,
                    "lora_id": None,
                    "medium": MEDIUM_GPU,
                    "lora_name": None,
                    "extra_keys": [None] * len(stored),
                }
            )
        if events and self.publish is not None:
            self.publish(events)

    def lookup_and_commit(self, token_ids: Sequence[int]) -> int:
        """Without the device model: look up and cache at once, on arrival."""
        digests = self.hashes(token_ids)
        cached = self.lookup(token_ids, digests)
        self.commit(token_ids, digests)
        return cached

    def reset(self) -> None:
        """vLLM's `reset_prefix_cache`: every cached block forgotten, `AllBlocksCleared`."""
        self._blocks.clear()
        if self.publish is not None:
            self.publish([{"type": "AllBlocksCleared"}])

    def __contains__(self, digest: bytes) -> bool:
        return digest in self._blocks

    @property
    def used_blocks(self) -> int:
        return len(self._blocks)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0
