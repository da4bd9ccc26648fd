"""The vLLM double's block pool on its own (simulators/vllm_kv_cache.py): vLLM's
eviction order, a request's hit blocks kept while it stores new ones, a prompt larger
than the pool, reset; and the CLI refusing a config vLLM would refuse."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from simulators.testing import REPO_ROOT
from simulators.vllm_kv_cache import VllmBlockCache
from simulators.vllm_kv_hash import chain, external


def _pool(blocks: int) -> tuple[VllmBlockCache, list[list[dict[str, Any]]]]:
    batches: list[list[dict[str, Any]]] = []
    return VllmBlockCache.from_override(blocks, batches.append), batches


def _ints(ids: list[int]) -> list[int]:
    return [external(d) for d in chain(ids)]


def test_hit_blocks_at_the_front_of_the_queue_are_not_evicted_by_their_own_request() -> None:
    pool, batches = _pool(5)  # 4 usable blocks
    a, b = list(range(32)), list(range(100, 132))
    pool.lookup_and_commit(a)
    pool.lookup_and_commit(b)  # full; the queue, front first: a1 a0 b1 b0
    c = a + list(range(500, 532))  # a's two blocks, then two new ones
    assert pool.lookup_and_commit(c) == 32
    removed = [e["block_hashes"] for e in batches[-1] if e["type"] == "BlockRemoved"]
    assert removed == [[_ints(b)[1]], [_ints(b)[0]]]
    stored = batches[-1][-1]
    assert stored["block_hashes"] == _ints(c)[2:] and stored["parent_block_hash"] == _ints(c)[1]
    assert pool.used_blocks == 4 and all(d in pool for d in chain(c))


def test_a_prompt_larger_than_the_pool_caches_its_first_blocks() -> None:
    pool, batches = _pool(3)  # 2 usable blocks
    ids = list(range(64))
    assert pool.lookup_and_commit(ids) == 0
    (stored,) = batches[-1]
    assert stored["block_hashes"] == _ints(ids)[:2] and stored["token_ids"] == ids[:32]
    assert pool.lookup_and_commit(ids) == 32
    assert pool.queries == 128 and pool.hits == 32


def test_partial_blocks_are_not_cached_and_reset_clears() -> None:
    pool, batches = _pool(10)
    assert pool.lookup_and_commit(list(range(15))) == 0
    assert batches == []  # no full block: no step with events
    pool.lookup_and_commit(list(range(16)))
    pool.reset()
    assert batches[-1] == [{"type": "AllBlocksCleared"}] and pool.used_blocks == 0
    assert pool.lookup_and_commit(list(range(16))) == 0


def test_the_cli_refuses_a_config_vllm_refuses() -> None:
    for config in ('{"enable_kv_cache_events": true, "bogus": 1}', '{"publisher": "kafka"}', "not json"):
        done = subprocess.run(
            [sys.executable, "-m", "simulators", "vllm", "--kv-events-config", config],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 2 and "--kv-events-config" in done.stderr, done.stderr


def test_kv_cache_usage_is_relative_to_the_pool(make_sim) -> None:
    import threading

    import httpx

    sim = make_sim("vllm", num_gpu_blocks_override=5, ttft_ms=400)  # 4 blocks: 64 tokens
    body = {"model": "sim-model", "prompt": list(range(32)), "max_tokens": 1}
    worker = threading.Thread(target=lambda: httpx.post(sim.url + "/v1/completions", json=body, timeout=10))
    worker.start()
    try:
        usage = None
        for _ in range(100):
            text = httpx.get(sim.url + "/metrics").text
            line = next(x for x in text.splitlines() if x.startswith("vllm:kv_cache_usage_perc{"))
            usage = float(line.rsplit(" ", 1)[1])
            if usage:
                break
        assert usage == 0.5
    finally:
        worker.join()
