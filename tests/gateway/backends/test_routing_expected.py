"""A request routed by the precise prefix is expected on its engine: the next request
of its prefix follows it there before the engine has computed and announced the
blocks, and the engine's own events then confirm them (policies/kv_index.py)."""

from __future__ import annotations

import pytest

from adapters.base import GenerationRequest
from adapters.kv_events import KVEventBatch
from gateway.backends.backend_set import BackendSet
from gateway.config.schema import parse_config

SYSTEM = "You are the catalogue of a seed shop. Answer in one line. " * 6


def chat(question: str) -> GenerationRequest:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return GenerationRequest("r", "m", messages=messages, tenant="t")


@pytest.fixture
async def pool(tiny_model_dir):
    backends = [
        {"name": f"n{i}", "adapter": "native", "model_path": str(tiny_model_dir), "served_model": f"tiny-{i}"}
        for i in range(3)
    ]
    # Inflight alone would send the second request elsewhere: the first one is in flight on its backend.
    # Load factor 2: with one request in flight, 1.25 would bound its backend to that one.
    profile = {"scorers": {"prefix_precise": 3, "inflight": 2}, "load_factor": 2}
    bs = BackendSet(parse_config({"models": {"m": {"routing": profile, "backends": backends}}}))
    for b in bs.backends.values():
        await b.adapter.start()
    yield bs
    await bs.aclose()


async def test_the_second_request_of_a_prefix_follows_the_first_before_its_prefill(pool):
    p = pool.pools["m"]
    first = p.route(chat("Do you sell tomato seeds?"))
    chosen = first.candidates[0]
    assert [b.prefix_precise for b in first.candidates] == [0.0, 0.0, 0.0]  # nothing cached, nothing expected
    chosen_backend = pool.backends[chosen.name]
    chosen_backend.inflight += 1  # dispatch counts it in flight while the engine has not started it
    second = p.route(chat("And basil?"))
    assert second.candidates[0].name == chosen.name
    assert second.candidates[0].prefix_precise > 0.5  # the shared system prompt, expected
    assert [b.prefix_precise for b in second.candidates[1:]] == [0.0, 0.0]  # the others expect nothing
    assert pool.feeds[chosen.name].index.stats().expected > 0


async def test_the_engines_events_confirm_what_was_expected(pool):
    p = pool.pools["m"]
    req = chat("Do you sell tomato seeds?")
    name = p.route(req).candidates[0].name
    feed = pool.feeds[name]
    expected = feed.index.stats().expected
    assert expected > 0 and len(feed.index) == 0
    req.sampling.max_tokens = 2
    async for _ in pool.backends[name].adapter.generate(req):
        pass
    feed.drain()
    # Stored now: confirmed entries, no longer expected ones (which would expire).
    assert feed.index.stats().expected == 0 and len(feed.index) >= expected
    again = p.route(chat("Do you sell tomato seeds?"))
    assert again.candidates[0].name == name and again.candidates[0].prefix_precise == 1.0


async def test_a_vllm_backend_expects_a_token_id_prompt_and_never_a_text_one():
    def vllm(name: str) -> dict:
        events = {"endpoint": "tcp://127.0.0.1:9", "block_size": 16}
        return {"name": name, "adapter": "vllm", "url": "http://127.0.0.1:9", "kv_events": events}

    profile = {"scorers": {"prefix_precise": 3}}
    bs = BackendSet(parse_config({"models": {"m": {"routing": profile, "backends": [vllm("a"), vllm("b")]}}}))
    try:
        p = bs.pools["m"]
        ids = list(range(100, 100 + 16 * 8))  # eight full blocks
        chosen = p.route(GenerationRequest("r", "m", kind="completion", prompt=ids)).candidates[0].name
        other = "b" if chosen == "a" else "a"
        assert bs.feeds[chosen].index.stats().expected == 8 and bs.feeds[other].index.stats().expected == 0
        again = p.route(GenerationRequest("r", "m", kind="completion", prompt=ids))
        assert [(b.name, b.prefix_precise) for b in again.candidates] == [(chosen, 1.0), (other, 0.0)]
        # Text cannot be named in vLLM's hashes: nothing expected anywhere.
        p.route(GenerationRequest("r", "m", kind="completion", prompt="some text " * 50))
        assert bs.feeds[other].index.stats().expected == 0 and bs.feeds[chosen].index.stats().expected == 8
        # A gap in the runtime's sequence numbers: the index starts again, the guesses too.
        index = bs.feeds[chosen].index
        index.receive(0, KVEventBatch(0.0, ()))
        index.receive(5, KVEventBatch(0.0, ()))
        assert index.stats().expected == 0 and index.stats().gaps == 1
    finally:
        await bs.aclose()
