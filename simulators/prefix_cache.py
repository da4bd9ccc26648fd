"""A toy prefix cache, so simulators can report `cached_tokens` and hit rates that
behave like a real radix/paged cache: a prompt's leading full blocks of
`BLOCK_TOKENS` tokens are cached if an earlier prompt had the same leading blocks.

Blocks are identified by a chained hash (each block's key includes the previous
block's key), as in vLLM's prefix caching. Memory is bounded; the oldest block
keys are forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict

BLOCK_TOKENS = 16


class PrefixCache:
    def __init__(self, capacity_blocks: int = 65536) -> None:
        self.capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.queries = 0  # prompt tokens looked up
        self.hits = 0  # prompt tokens found cached

    def lookup_and_insert(self, words: list[str]) -> int:
        """Number of leading prompt tokens already cached; then caches this prompt."""
        cached = 0
        still_hitting = True
        key = 0
        full_blocks = len(words) // BLOCK_TOKENS
        for b in range(full_blocks):
            key = hash((key, tuple(words[b * BLOCK_TOKENS : (b + 1) * BLOCK_TOKENS])))
            if still_hitting and key in self._blocks:
                cached += BLOCK_TOKENS
                self._blocks.move_to_end(key)
            else:
                still_hitting = False
                self._blocks[key] = None
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
        self.queries += len(words)
        self.hits += cached
        return cached

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0

    @property
    def used_blocks(self) -> int:
        return len(self._blocks)
