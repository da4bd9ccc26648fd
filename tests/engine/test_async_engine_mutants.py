"""engine/async_engine.py on a tiny model built once per module: streams and their ends, a stream id
in use, an abort before any choice was forked, an engine failure reaching every stream, shutdown,
the metrics, and the embedding passes' share of the engine (their budget while generation waits,
and the wait for the step time generation is owed)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch
from prometheus_client import CollectorRegistry

from engine.async_engine import SHARED_PASS_DIVISOR, AsyncEngine
from engine.llm_engine import LLMEngine
from engine.pooling import PoolingInputError
from engine.sampling_params import SamplingParams
from tests.engine.conftest import build_tiny_model, random_prompts
from tests.engine.test_model_mutants import SMALL, VOCAB


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("async_llama")
    build_tiny_model(path, "llama", seed=41, max_position_embeddings=64, **SMALL)
    return str(path)


@pytest.fixture
async def engine(tiny):
    registry = CollectorRegistry()
    served = AsyncEngine(LLMEngine(tiny, block_size=4, max_num_batched_tokens=12), registry=registry)
    served.registry = registry
    yield served
    await served.shutdown()


async def _collect(served: AsyncEngine, rid: str, prompt: list[int], params: SamplingParams) -> list:
    return [out async for out in served.generate(rid, prompt, params)]


def _forced(token: int, max_tokens: int, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, logit_bias={token: 100.0}, **kw)


async def test_streams_end_with_their_last_choice_and_leave_nothing(engine):
    a, b = await asyncio.gather(
        _collect(engine, "a", [5, 6, 7], _forced(9, 3)), _collect(engine, "b", [8], _forced(10, 2, n=2))
    )
    assert [o.token_ids for o in a] == [[9], [9], [9]] and a[-1].finish_reason == "length"
    assert sorted((o.index, o.token_ids[0]) for o in b) == [(0, 10), (0, 10), (1, 10), (1, 10)]
    assert not engine.engine.has_unfinished_requests() and engine._streams == {}
    # every step was observed: its prompt tokens looked up, its time and batch recorded
    sample = engine.registry.get_sample_value
    assert sample("switchyard_engine_prefix_cache_queries_tokens_total", {"engine": "engine"}) == 4
    assert sample("switchyard_engine_batch_tokens_sum", {"engine": "engine"}) == 4 + 3 + 1
    assert sample("switchyard_engine_running_sequences", {"engine": "engine"}) == 0
    assert engine.stats().num_free_blocks == engine.stats().num_blocks


async def test_a_stream_id_in_use_is_refused(engine):
    gen = engine.generate("x", [5] * 4, _forced(9, 50))
    await gen.__anext__()
    with pytest.raises(ValueError) as caught:
        await _collect(engine, "x", [5], _forced(9, 1))
    assert str(caught.value) == "request id 'x' is already streaming"
    assert engine.engine.has_unfinished_requests()  # the first stream is untouched
    await gen.aclose()
    assert not engine.engine.has_unfinished_requests() and engine._streams == {}


async def test_closing_a_finished_stream_aborts_nothing(engine):
    outs = await _collect(engine, "done", [5, 6], _forced(9, 1))
    assert outs[-1].finish_reason == "length"
    engine.abort("done")  # gone: nothing to end
    engine.abort("never")
    assert engine._streams == {}


async def test_an_abort_ends_every_choice_forked_or_not(engine):
    idle = threading.Thread(target=lambda: None)  # no stepping thread: the choices are never forked
    idle.start()
    idle.join()
    engine._thread = idle
    gen = engine.generate("n", [5] * 6, _forced(9, 40, n=3))
    first = asyncio.ensure_future(gen.__anext__())
    await asyncio.sleep(0)
    assert len(engine.engine.requests["n"].seqs) == 1
    engine.abort("n")
    outs = [await first] + [o async for o in gen]
    fields = sorted(
        (o.index, o.request_id, o.token_ids, o.logprobs, o.finished, o.finish_reason, o.num_prompt_tokens)
        + (o.num_cached_tokens,)
        for o in outs
    )
    assert fields == [(i, "n", [], None, True, "abort", 0, 0) for i in range(3)]
    assert not engine.engine.has_unfinished_requests() and engine._streams == {}


async def test_an_engine_failure_reaches_every_stream_and_the_loop_goes_on(engine):
    def broken(output_ids):
        raise RuntimeError("grammar exploded")

    results = await asyncio.gather(
        _collect(engine, "ok", [5, 6], _forced(9, 20)),
        _collect(engine, "bad", [5, 6], _forced(9, 20, allowed_tokens_fn=broken)),
        return_exceptions=True,
    )
    assert [str(r) for r in results] == ["grammar exploded", "grammar exploded"]
    assert not engine.engine.has_unfinished_requests()
    after = await _collect(engine, "after", [5], _forced(9, 2))
    assert [o.token_ids for o in after] == [[9], [9]]


async def test_shutdown_stops_the_thread_and_aborts_what_is_left(engine):
    gen = engine.generate("left", [5] * 3, _forced(9, 50))
    await gen.__anext__()
    thread = engine._thread
    await engine.shutdown()
    assert thread is not None and not thread.is_alive()
    assert engine._thread is None and engine._stopping is False
    assert not engine.engine.has_unfinished_requests()
    # started again by the next request
    assert [o.token_ids for o in await _collect(engine, "again", [5], _forced(9, 1))] == [[9]]
    assert engine._thread is not None and engine._thread.is_alive()


async def test_embeddings_match_the_engines_and_share_it_while_generation_waits(engine):
    prompts = random_prompts([1, 2, 1, 5, 3], VOCAB, seed=1)
    want = engine.engine.embed(prompts)
    got = await engine.embed(prompts)
    assert torch.allclose(torch.tensor(got), torch.tensor(want), atol=1e-6)
    assert SHARED_PASS_DIVISOR == 4
    # idle: passes of the whole budget (12 tokens, all five prompts); busy: of 12 // 4 = 3
    vectors, end, owed = engine._embed_pass(prompts, 0, None, 0.0)
    assert end == 5 and len(vectors) == 5 and owed >= engine._step_seconds
    engine.engine.add_request("busy", [5], _forced(9, 1))  # generation waits (no thread steps it here)
    assert engine._embed_pass(prompts, 0, None, 0.0)[1] == 2
    assert engine._embed_pass(prompts, 3, None, 0.0)[1] == 4  # at least one prompt, even over the budget
    engine.engine.abort_request("busy")


def test_an_embedding_pass_waits_for_the_step_time_it_owes(tiny):
    served = AsyncEngine(LLMEngine(tiny, block_size=4))
    served.engine.add_request("busy", [5], _forced(9, 1))

    def steps():
        for _ in range(2):
            time.sleep(0.05)
            served._count_step(0.6)

    stepper = threading.Thread(target=steps)
    stepper.start()
    began = served._step_seconds
    vectors, end, owed = served._embed_pass([[5, 6]], 0, None, began + 1.0)
    stepper.join()
    assert served._step_seconds == pytest.approx(began + 1.2) and owed >= began + 1.2 and end == 1
    served.engine.abort_request("busy")
    # nothing waits to be generated: no wait, whatever is owed
    assert served._embed_pass([[5, 6]], 0, None, 1e9)[1] == 1


async def test_a_request_keeps_its_priority_and_the_stepping_thread_is_a_named_daemon(engine):
    idle = threading.Thread(target=lambda: None)  # nothing steps: the request stays as added
    idle.start()
    idle.join()
    engine._thread = idle
    plain, urgent = engine.generate("plain", [5], _forced(9, 4)), engine.generate("urgent", [5], _forced(9, 4), 3)
    firsts = [asyncio.ensure_future(plain.__anext__()), asyncio.ensure_future(urgent.__anext__())]
    await asyncio.sleep(0)
    assert [engine.engine.requests[r].seqs[0].priority for r in ("plain", "urgent")] == [0, 3]
    engine.abort("plain")
    engine.abort("urgent")
    await asyncio.gather(*firsts)
    await plain.aclose()
    await urgent.aclose()
    engine._thread = None
    await _collect(engine, "stepped", [5], _forced(9, 1))
    assert engine._thread.name == "switchyard-engine" and engine._thread.daemon is True


async def test_embeddings_refuse_dimensions_the_model_cannot_give(engine):
    with pytest.raises(PoolingInputError) as caught:
        await engine.embed([[5, 6]], dimensions=4)
    assert "matryoshka" in str(caught.value)


async def test_embeddings_over_several_passes_keep_every_passs_vectors(engine):
    prompts = random_prompts([5, 5, 5, 5], VOCAB, seed=2)  # 20 tokens: two passes of the 12-token budget at least
    got = await engine.embed(prompts)
    want = engine.engine.embed(prompts)
    assert len(got) == 4 and torch.allclose(torch.tensor(got), torch.tensor(want), atol=1e-6)


async def test_the_metrics_carry_the_engines_name(tiny):
    registry = CollectorRegistry()
    served = AsyncEngine(LLMEngine(tiny, block_size=4), registry=registry, name="native-a")
    try:
        await _collect(served, "m", [5, 6], _forced(9, 1))
    finally:
        await served.shutdown()
    assert registry.get_sample_value("switchyard_engine_prefix_cache_queries_tokens_total", {"engine": "native-a"}) == 2


async def test_a_matryoshka_models_embeddings_are_cut_to_the_dimensions_asked(tiny):
    served = AsyncEngine(LLMEngine(tiny, block_size=4, matryoshka=True))
    try:
        got = await served.embed([[5, 6], [7]], dimensions=4)
    finally:
        await served.shutdown()
    want = served.engine.embed([[5, 6], [7]], 4)
    assert [len(v) for v in got] == [4, 4] and torch.allclose(torch.tensor(got), torch.tensor(want), atol=1e-6)


async def test_the_step_time_counted_is_the_time_spent_and_a_first_pass_waits_for_none(tiny):
    served = AsyncEngine(LLMEngine(tiny, block_size=4))
    try:
        began = time.perf_counter()
        await _collect(served, "g", [5, 6], _forced(9, 2))
        assert 0 < served._step_seconds <= time.perf_counter() - began  # from 0, each step's own time
        before, began = served._step_seconds, time.perf_counter()
        _, _, owed = served._embed_pass([[5, 6]], 0, None, 0.0)
        assert before <= owed <= before + (time.perf_counter() - began)
    finally:
        await served.shutdown()
    waiting = AsyncEngine(LLMEngine(tiny, block_size=4))
    waiting.engine.add_request("busy", [5], _forced(9, 1))  # generation waits; nothing steps it
    async with asyncio.timeout(30):  # the first pass owes nothing: it runs at once
        assert len(await waiting.embed([[5, 6]])) == 1
    waiting.engine.abort_request("busy")
