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
    def __init__(
        self, capacity_blocks: int = 65536, block_tokens: int = BLOCK_TOKENS, recompute_last: bool = False
    ) -> None:
        self.capacity = capacity_blocks
        self.block_tokens = block_tokens
        # A radix cache (SGLang) never reports the last prompt token as cached.
        self.recompute_last = recompute_last
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.queries = 0  # prompt tokens looked up
        self.hits = 0  # prompt tokens found cached

    def lookup_and_insert(self, words: list[str]) -> int:
        """Number of leading prompt tokens already cached; then caches this prompt."""
        cached = 0
        still_hitting = True
        key = 0
        size = self.block_tokens
        full_blocks = len(words) // size
        for b in range(full_blocks):
            key = hash((key, tuple(words[b * size : (b + 1) * size])))
            if still_hitting and key in self._blocks:
                cached += size
                self._blocks.move_to_end(key)
            else:
                still_hitting = False
                self._blocks[key] = None
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
        if self.recompute_last:
            cached = min(cached, max(len(words) - 1, 0))
        self.queries += len(words)
        self.hits += cached
        return cached

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0

    @property
    def used_blocks(self) -> int:
        return len(self._blocks)


def radix_cache() -> PrefixCache:
    """SGLang's radix cache: it matches token by token and always computes the last
    prompt token again, so a repeated prompt reports prompt_tokens - 1 cached tokens
    (SGLang's test/srt/openai_server/features/test_cache_report.py), not whole blocks."""
    return PrefixCache(block_tokens=1, recompute_last=True)
