"""The native engine's prefix-cache events: emitted by the block pool, exposed in
process by the native adapter, and enough for a router's index to mirror the cache."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from adapters.base import GenerationRequest, SamplingParams, Usage
from adapters.kv_events import BlockRemoved as KVBlockRemoved
from adapters.kv_events import KVEventBatch
from adapters.native import NativeAdapter
from engine.block_pool import AllBlocksCleared, BlockPool, BlockRemoved, BlockStored
from engine.kv_cache_manager import KVCacheManager
from engine.make_tiny import make_tiny
from engine.sampling_params import SamplingParams as EngineSamplingParams
from engine.sequence import Sequence
from policies.kv_index import KVBlockIndex

BLOCK = 16


def test_the_pool_reports_stored_evicted_and_cleared_blocks():
    pool = BlockPool(3)
    events: list = []
    pool.event_sink = events.append
    a, b = pool.allocate(), pool.allocate()
    pool.cache(a, 100, (1, 2), parent_hash=None)
    pool.cache(b, 101, (3, 4), parent_hash=100)
    pool.cache(pool.allocate(), 100, (1, 2))  # the same contents twice: not published again
    assert events == [BlockStored(100, None, (1, 2)), BlockStored(101, 100, (3, 4))]
    pool.free(b)
    pool.free(a)
    events.clear()
    pool.allocate()  # reuses a cached free block: its contents leave the cache
    assert events == [BlockRemoved(101)]
    pool.reset_prefix_cache()
    assert events[-1] == AllBlocksCleared()


def test_the_managers_block_hashes_are_the_ones_it_caches_under():
    pool = BlockPool(16)
    kv = KVCacheManager(pool, block_size=4)
    stored: list = []
    pool.event_sink = stored.append
    tokens = list(range(10, 21))  # 11 tokens: 2 full blocks
    seq = Sequence("r", 0, tokens, EngineSamplingParams())
    assert kv.allocate_slots(seq, len(tokens))
    seq.num_computed_tokens = len(tokens)
    kv.cache_full_blocks(seq)
    hashes = kv.block_hashes(tokens)
    assert len(hashes) == 2
    assert stored == [
        BlockStored(hashes[0], None, (10, 11, 12, 13)),
        BlockStored(hashes[1], hashes[0], (14, 15, 16, 17)),
    ]
    assert kv.block_hashes(tokens[:8] + [99] * 4)[:2] == hashes


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("kv-events") / "tiny")


def ask(system: str, question: str) -> GenerationRequest:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return GenerationRequest("r", "m", messages=messages, sampling=SamplingParams(max_tokens=2, temperature=0.0))


async def run(adapter: NativeAdapter, req: GenerationRequest) -> Usage:
    usage = None
    async for event in adapter.generate(req):
        if isinstance(event, Usage):
            usage = event
    assert usage is not None
    return usage


def test_the_adapters_events_let_an_index_mirror_the_engines_cache(model_dir: Path):
    # A small cache, so that later prompts evict earlier ones and removals are reported too.
    adapter = NativeAdapter("n", str(model_dir), engine_options={"num_blocks": 24, "block_size": BLOCK})
    events: list = []
    adapter.subscribe_kv_events(events.append)  # before the engine exists: attached when it starts
    index = KVBlockIndex()

    async def scenario() -> None:
        system = "You are a terse assistant. Answer with one word. " * 3
        first = ask(system, "Which colour is the sky?")
        assert adapter.kv_block_hashes(first) is None  # no engine yet: nothing to name blocks with
        await run(adapter, first)
        index.apply(KVEventBatch(0.0, tuple(events)))
        hashes = adapter.kv_block_hashes(first)
        assert hashes and index.match(hashes) == len(hashes)
        assert index.block_size == BLOCK
        # A second question after the same system prompt: the engine's own cache hit is what the index predicted.
        second = ask(system, "And the grass?")
        predicted = index.match(adapter.kv_block_hashes(second))
        assert predicted > 0
        usage = await run(adapter, second)
        n_prompt = usage.prompt_tokens
        assert usage.cached_tokens == min(predicted, (n_prompt - 1) // BLOCK) * BLOCK
        # Enough other prompts to evict: the index keeps exactly the blocks the pool holds.
        for i in range(6):
            await run(adapter, ask(f"Another system prompt number {i}, different from the rest. " * 3, "Why?"))

    try:
        asyncio.run(scenario())
        mirror = KVBlockIndex()
        mirror.apply(KVEventBatch(0.0, tuple(events)))
        pool = adapter.async_engine.engine.pool
        assert any(isinstance(e, KVBlockRemoved) for e in events)
        assert set(mirror._blocks) == set(pool._cached)
    finally:
        asyncio.run(adapter.aclose())
