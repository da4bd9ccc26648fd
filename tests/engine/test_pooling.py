"""Embeddings from the native engine (engine/pooling.py) equal vLLM's pooling of a decoder
model computed with transformers: the last token's hidden state after the final norm
(`last_hidden_state[:, -1]`), L2-normalized, within 1e-4; and the pass leaves the paged
cache and the generations in it alone."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time

import pytest
import torch
import torch.nn.functional as F

from engine.async_engine import AsyncEngine
from engine.llm_engine import LLMEngine
from engine.pooling import PoolingInputError, batches
from engine.sampling_params import SamplingParams
from tests.engine.conftest import hf_greedy, random_prompts, run_to_completion, tokens_of

LENGTHS = [1, 2, 7, 8, 9, 33, 120, 5]


def reference(model, prompt: list[int], dimensions: int | None = None) -> torch.Tensor:
    with torch.no_grad():
        state = model.model(torch.tensor([prompt])).last_hidden_state[0, -1]
    if dimensions is not None:
        state = state[:dimensions]
    return F.normalize(state, dim=-1)


@pytest.mark.parametrize("fixture", ["llama_dir", "qwen2_dir"])
def test_embeddings_match_transformers_last_token_pooling(fixture, request):
    path, model = request.getfixturevalue(fixture)
    # A small token budget: the prompts run in several passes, mixing one-token prompts and longer ones.
    engine = LLMEngine(path, block_size=8, max_num_batched_tokens=40)
    prompts = random_prompts(LENGTHS, 384, seed=3)
    assert len(engine.embedding_batches(prompts)) > 2
    vectors = engine.embed(prompts)
    assert len(vectors) == len(prompts)
    for prompt, vector in zip(prompts, vectors):
        got = torch.tensor(vector)
        assert got.shape == (model.config.hidden_size,)
        assert torch.allclose(got, reference(model, prompt), atol=1e-4), f"prompt of {len(prompt)} tokens"
        assert abs(got.norm().item() - 1.0) < 1e-5


def test_the_same_prompt_alone_or_in_a_batch_gets_the_same_vector(llama_dir):
    path, _ = llama_dir
    engine = LLMEngine(path, block_size=4)
    prompts = random_prompts([3, 17, 40], 384, seed=5)
    together = engine.embed(prompts)
    for prompt, vector in zip(prompts, together):
        alone = engine.embed([prompt])[0]
        assert torch.allclose(torch.tensor(alone), torch.tensor(vector), atol=1e-5)


def test_a_pooling_pass_leaves_running_generations_and_the_cache_alone(llama_dir):
    path, model = llama_dir
    engine = LLMEngine(path, block_size=8)
    prompt = random_prompts([20], 384, seed=9)[0]
    greedy = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    engine.add_request("g", prompt, greedy)
    for _ in range(3):
        engine.step()
    free_before = engine.pool.num_free_blocks
    engine.embed(random_prompts([30, 12, 64], 384, seed=10))
    assert engine.pool.num_free_blocks == free_before  # no block taken or released
    outs = run_to_completion(engine)
    engine.check_integrity()
    # The three tokens stepped before the pass are not in `outs`; the rest must match transformers.
    assert tokens_of(outs["g"][0]) == hf_greedy(model, prompt, 10)[3:]


def test_refusals_name_the_field(llama_dir):
    path, _ = llama_dir
    engine = LLMEngine(path, block_size=8, max_model_len=64)
    with pytest.raises(PoolingInputError) as too_long:
        engine.embed([[5] * 65])
    assert too_long.value.param == "input" and too_long.value.code == "context_length_exceeded"
    assert "maximum context length is 64 tokens" in str(too_long.value)
    with pytest.raises(PoolingInputError) as outside:
        engine.embed([[5, 384]])
    assert outside.value.param == "input" and outside.value.code is None
    with pytest.raises(PoolingInputError) as empty:
        engine.embed([[5], []])
    assert empty.value.param == "input"
    with pytest.raises(PoolingInputError) as dims:
        engine.embed([[5, 6]], dimensions=16)
    assert dims.value.param == "dimensions" and "matryoshka" in str(dims.value)


def test_matryoshka_models_cut_then_normalize(llama_dir, tmp_path):
    path, model = llama_dir
    shutil.copytree(path, tmp_path / "m", dirs_exist_ok=True)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["matryoshka_dimensions"] = [16, 32]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    engine = LLMEngine(str(tmp_path / "m"), block_size=8)
    prompt = random_prompts([11], 384, seed=4)[0]
    (vector,) = engine.embed([prompt], dimensions=16)
    assert len(vector) == 16
    assert torch.allclose(torch.tensor(vector), reference(model, prompt, 16), atol=1e-4)
    with pytest.raises(PoolingInputError) as unlisted:
        engine.embed([prompt], dimensions=20)
    assert unlisted.value.param == "dimensions" and "[16, 32]" in str(unlisted.value)


def test_batches_hold_the_token_budget_in_order():
    prompts = [[1] * n for n in (3, 4, 5, 20, 1, 1)]
    assert [[len(p) for p in b] for b in batches(prompts, 8)] == [[3, 4], [5], [20], [1, 1]]


def test_a_cancelled_embedding_runs_no_further_pass(llama_dir):
    path, _ = llama_dir
    engine = LLMEngine(path, block_size=8, max_num_batched_tokens=16)
    passes: list[int] = []
    started = threading.Event()
    real = engine.embed_batch

    def slow_pass(prompts, dimensions=None):
        passes.append(len(prompts))
        started.set()
        time.sleep(0.2)
        return real(prompts, dimensions)

    engine.embed_batch = slow_pass  # type: ignore[method-assign]
    prompts = random_prompts([16] * 6, 384, seed=2)
    assert len(engine.embedding_batches(prompts)) == 6

    async def scenario() -> None:
        async_engine = AsyncEngine(engine)
        task = asyncio.create_task(async_engine.embed(prompts))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)  # a pass that was still running ends by itself; no other starts
        await async_engine.shutdown()

    asyncio.run(scenario())
    assert len(passes) == 1


@pytest.mark.parametrize(("flag", "ok", "refused"), [(True, 20, None), ([16, 32], 16, 20)])
def test_the_matryoshka_option_lets_a_model_cut_its_vectors(llama_dir, flag, ok, refused):
    # the backend's `options: {matryoshka: ...}` (vLLM's --hf-overrides) over a config.json
    # that declares nothing: true allows any size, a list only its sizes
    path, model = llama_dir
    engine = LLMEngine(str(path), block_size=8, matryoshka=flag)
    prompt = random_prompts([11], 384, seed=4)[0]
    (vector,) = engine.embed([prompt], dimensions=ok)
    assert len(vector) == ok
    assert torch.allclose(torch.tensor(vector), reference(model, prompt, ok), atol=1e-4)
    if refused is not None:
        with pytest.raises(PoolingInputError) as unlisted:
            engine.embed([prompt], dimensions=refused)
        assert unlisted.value.param == "dimensions"


def test_without_the_flag_dimensions_is_refused_saying_how_to_allow_it(llama_dir):
    engine = LLMEngine(str(llama_dir[0]), block_size=8, matryoshka=False)
    with pytest.raises(PoolingInputError) as dims:
        engine.embed([[5, 6]], dimensions=16)
    assert dims.value.param == "dimensions" and "options: {matryoshka: true}" in str(dims.value)
    with pytest.raises(ValueError, match="matryoshka"):
        LLMEngine(str(llama_dir[0]), block_size=8, matryoshka=[0])


def test_a_chat_beside_a_large_embeddings_call_is_served_during_it(llama_dir):
    """Finding 14: one tenant's large embeddings call and another's chats on the same
    engine. Each pass is made slow (a sleep, so the machine's load does not change the
    ratio of pass to step); a 16-token chat needs 17 steps. Passes taken back to back
    with one step between them serve about one chat in the whole call; sharing the
    engine by time serves about one chat per pass (16 passes here; 8 is the generous floor)."""
    path, _ = llama_dir
    engine = LLMEngine(path, block_size=8, max_num_batched_tokens=64)
    real = engine.embed_batch

    def slow_pass(prompts, dimensions=None):
        time.sleep(0.03)
        return real(prompts, dimensions)

    engine.embed_batch = slow_pass  # type: ignore[method-assign]
    prompts = random_prompts([16] * 64, 384, seed=3)
    params = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True)

    async def scenario() -> tuple[int, int]:
        async_engine = AsyncEngine(engine)
        call = asyncio.create_task(async_engine.embed(prompts))
        served = 0
        while not call.done():
            async for _ in async_engine.generate(f"chat-{served}", [5, 6, 7, 8], params):
                pass
            served += 1
        vectors = await call
        await async_engine.shutdown()
        return served, len(vectors)

    served, embedded = asyncio.run(scenario())
    assert embedded == len(prompts)
    assert served >= 8
    engine.check_integrity()
