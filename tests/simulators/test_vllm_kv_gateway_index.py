"""Two witnesses of one cache: the vLLM double's prefix cache, and the gateway's
index of it built only from the double's KV events (adapters/kv_events_zmq.py's
subscriber feeding policies/kv_index.py's `KVBlockIndex`, as gateway/backends/kv_feeds.py
wires them). Under a workload of shared prefixes that keeps evicting, before
every request the index's match of the prompt's blocks must equal what the
double then reports as cached. The subscriber joins after the first batch, so it
also needs the replay socket to learn what came before."""

from __future__ import annotations

import asyncio
import json
import random

import httpx

from adapters.kv_events import vllm_block_hashes
from adapters.kv_events_zmq import KVEventSubscriber
from policies.kv_index import KVBlockIndex, KVIndexSettings
from processes import free_port


def test_gateway_index_tracks_the_double_through_evictions(make_sim) -> None:
    pub, replay = free_port(), free_port()
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://127.0.0.1:{pub}",
        "replay_endpoint": f"tcp://127.0.0.1:{replay}",
        "topic": "",
    }
    sim = make_sim(
        "vllm", kv_events_config=json.dumps(config), num_gpu_blocks_override=13, enable_prompt_tokens_details=True
    )
    rng = random.Random(7)
    systems = [[rng.randrange(1, 50_000) for _ in range(48)] for _ in range(3)]  # 3 blocks each
    prompts = [
        rng.choice(systems) + [rng.randrange(1, 50_000) for _ in range(rng.choice((8, 16, 40)))] for _ in range(40)
    ]

    async def published(http: httpx.AsyncClient) -> int:
        return (await http.get("/_sim/stats")).json()["kv_cache"]["batches_published"]

    async def cached(http: httpx.AsyncClient, ids: list[int]) -> int:
        body = {"model": "sim-model", "prompt": ids, "max_tokens": 1}
        return (await http.post("/v1/completions", json=body)).json()["usage"]["prompt_tokens_details"]["cached_tokens"]

    async def main() -> tuple[int, int, int, int]:
        index = KVBlockIndex(KVIndexSettings(block_size=16))
        subscriber = KVEventSubscriber("sim", config["endpoint"], index, replay_endpoint=config["replay_endpoint"])
        async with httpx.AsyncClient(base_url=sim.url, timeout=10) as http:
            assert await cached(http, prompts[0]) == 0  # published before anyone listens
            subscriber.start()
            await asyncio.sleep(0.5)
            # A first live batch (a fresh prompt): seeing number 1, the subscriber asks for 0.
            assert await cached(http, list(range(90_000, 90_032))) == 0
            agreed = 0
            hits = 0
            try:
                for ids in prompts[1:]:
                    expected = await published(http) - 1
                    for _ in range(500):
                        if index.last_seq == expected:
                            break
                        await asyncio.sleep(0.01)
                    assert index.last_seq == expected, (index.last_seq, expected)
                    matched = index.match(vllm_block_hashes(ids, 16))
                    got = await cached(http, ids)
                    assert got == 16 * matched, (got, matched)
                    agreed += 1
                    hits += matched > 0
            finally:
                await subscriber.aclose()
            evicted = (await http.get("/_sim/stats")).json()["kv_cache"]["evicted"]
            return agreed, hits, evicted, subscriber.stats.replayed_batches

    agreed, hits, evicted, replayed = asyncio.run(main())
    assert agreed == len(prompts) - 1
    assert hits > 5 and evicted > 10  # the workload both hits and evicts
    assert replayed >= 1  # the batch published before subscribing came from the replay socket
