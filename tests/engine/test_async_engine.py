"""AsyncEngine: concurrent streams, cancellation aborts, metrics export."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from engine.async_engine import AsyncEngine
from engine.llm_engine import ContextLengthError, LLMEngine
from engine.sampling_params import SamplingParams
from tests.engine.conftest import hf_greedy, random_prompts


@pytest.fixture
def async_engine(llama_dir):
    registry = CollectorRegistry()
    engine = AsyncEngine(LLMEngine(llama_dir[0], block_size=8, max_model_len=256), registry=registry)
    engine.registry = registry
    yield engine
    engine.engine.check_integrity()


async def _collect(engine, rid, prompt, params):
    tokens, last = [], None
    async for out in engine.generate(rid, prompt, params):
        tokens.extend(out.token_ids)
        last = out
    return tokens, last


async def test_concurrent_generate_matches_transformers(async_engine, llama_dir):
    _, model = llama_dir
    prompts = random_prompts([4, 19, 33, 8, 50], 384, seed=20)
    params = SamplingParams(max_tokens=10, temperature=0, ignore_eos=True)
    results = await asyncio.gather(*[_collect(async_engine, f"c{i}", p, params) for i, p in enumerate(prompts)])
    for (tokens, last), p in zip(results, prompts):
        assert tokens == hf_greedy(model, p, 10)
        assert last.finished and last.finish_reason == "length" and last.num_prompt_tokens == len(p)
    stats = async_engine.stats()
    assert stats.running == 0 and stats.num_free_blocks == stats.num_blocks
    text = generate_latest(async_engine.registry).decode()
    assert "switchyard_engine_running_sequences" in text
    assert "switchyard_engine_step_seconds_count" in text
    await async_engine.shutdown()


async def test_context_length_error_before_first_yield(async_engine):
    gen = async_engine.generate("big", [3] * 250, SamplingParams(max_tokens=50))
    with pytest.raises(ContextLengthError):
        await gen.__anext__()
    assert not async_engine.engine.has_unfinished_requests()
    await async_engine.shutdown()


async def test_consumer_cancel_aborts_and_frees_blocks(async_engine):
    prompt = random_prompts([40], 384, seed=21)[0]
    params = SamplingParams(max_tokens=200, ignore_eos=True)
    gen = async_engine.generate("cancel-me", prompt, params)
    first = await gen.__anext__()
    assert first.token_ids and not first.finished
    assert async_engine.engine.has_unfinished_requests()
    await gen.aclose()
    assert not async_engine.engine.has_unfinished_requests()
    async_engine.engine.check_integrity()
    stats = async_engine.stats()
    assert stats.num_free_blocks == stats.num_blocks

    async def consume():
        async for _ in async_engine.generate("task-cancel", prompt, params):
            pass

    task = asyncio.create_task(consume())
    while not async_engine.engine.has_unfinished_requests():
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not async_engine.engine.has_unfinished_requests()
    await async_engine.shutdown()


async def test_external_abort_ends_stream(async_engine):
    prompt = random_prompts([12], 384, seed=22)[0]
    gen = async_engine.generate("ext", prompt, SamplingParams(max_tokens=200, ignore_eos=True, n=2))
    await gen.__anext__()
    async_engine.abort("ext")
    reasons = [out.finish_reason async for out in gen if out.finished]
    assert reasons == ["abort", "abort"]
    assert not async_engine.engine.has_unfinished_requests()
    await async_engine.shutdown()


async def test_engine_failure_reaches_every_stream(async_engine):
    def broken(output_ids):
        raise RuntimeError("grammar exploded")

    ok = SamplingParams(max_tokens=50, ignore_eos=True)
    bad = SamplingParams(max_tokens=50, ignore_eos=True, allowed_tokens_fn=broken)
    prompt = random_prompts([6], 384, seed=23)[0]
    results = await asyncio.gather(
        _collect(async_engine, "ok", prompt, ok), _collect(async_engine, "bad", prompt, bad), return_exceptions=True
    )
    assert all(isinstance(r, RuntimeError) for r in results)
    assert not async_engine.engine.has_unfinished_requests()
    # the loop survives: a new request still completes
    tokens, last = await _collect(async_engine, "after", prompt, SamplingParams(max_tokens=3, ignore_eos=True))
    assert len(tokens) == 3 and last.finish_reason == "length"
    await async_engine.shutdown()
