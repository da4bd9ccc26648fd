"""Approximate prefix matching: what each backend probably holds in its prefix cache,
guessed from the prompts recently routed there, without a tokenizer. Prompts are cut
into `BLOCK_CHARS`-character blocks (token ids: 16-token blocks), at most `MAX_BLOCKS`
named by a hash chained over the blocks before; each backend keeps an LRU set of names
touched tail to head, so a match is a binary search (docs/architecture.md, "Routing").
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import orjson

from adapters.base import GenerationRequest

BLOCK_CHARS = 64
BLOCK_TOKENS = 16
MAX_BLOCKS = 512


def rendered_prompt(req: GenerationRequest) -> str:
    """The prompt as text, in the order a chat template lays it out."""
    if req.messages is None:
        return req.prompt if isinstance(req.prompt, str) else ""
    parts = [orjson.dumps(req.tools).decode()] if req.tools else []
    for m in req.messages:
        content = m.get("content")
        text = content if isinstance(content, str) else "" if content is None else orjson.dumps(content).decode()
        parts.append(f"{m.get('role')}\x1f{text}")
        if m.get("tool_calls"):
            parts.append(orjson.dumps(m["tool_calls"]).decode())
    return "\x1e".join(parts)


def prompt_blocks(req: GenerationRequest) -> list[int]:
    """The chained block names of the request's prompt (full blocks only)."""
    if isinstance(req.prompt, list) and req.messages is None:
        ids = req.prompt
        chunks: Sequence[object] = [
            tuple(ids[i : i + BLOCK_TOKENS])
            for i in range(0, min(len(ids), MAX_BLOCKS * BLOCK_TOKENS) - BLOCK_TOKENS + 1, BLOCK_TOKENS)
        ]
    else:
        text = rendered_prompt(req)
        end = min(len(text), MAX_BLOCKS * BLOCK_CHARS) - BLOCK_CHARS + 1
        chunks = [text[i : i + BLOCK_CHARS] for i in range(0, end, BLOCK_CHARS)]
    names = []
    parent = 0
    for chunk in chunks:
        parent = hash((parent, chunk))
        names.append(parent)
    return names


class PrefixIndex:
    """One backend's recently routed prompt blocks (bounded, least recently routed dropped first)."""

    def __init__(self, capacity: int = 65536) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1 block")
        self.capacity = capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def record(self, blocks: Sequence[int]) -> None:
        held = self._blocks
        for name in reversed(blocks):
            if name in held:
                held.move_to_end(name)
            else:
                held[name] = None
        while len(held) > self.capacity:
            held.popitem(last=False)

    def match(self, blocks: Sequence[int]) -> int:
        """How many leading blocks are held (binary search: held prefixes are closed)."""
        held = self._blocks
        lo, hi = 0, len(blocks)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if blocks[mid - 1] in held:
                lo = mid
            else:
                hi = mid - 1
        return lo
