"""Greedy decoding must equal transformers' generate() token for token, whatever the
batching, chunking, prefix-cache hits or preemptions did along the way."""

from __future__ import annotations

import pytest

from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.scheduler import ScheduledChunk
from tests.engine.conftest import build_tiny_model, hf_greedy, random_prompts, run_to_completion, tokens_of

MAX_NEW = 12
GREEDY = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)


def _check(engine: LLMEngine, model, prompts: list[list[int]], prefix: str = "r") -> dict:
    for i, p in enumerate(prompts):
        engine.add_request(f"{prefix}{i}", p, GREEDY)
    outs = run_to_completion(engine)
    for i, p in enumerate(prompts):
        got = tokens_of(outs[f"{prefix}{i}"][0])
        assert got == hf_greedy(model, p, MAX_NEW), f"prompt {i} (len {len(p)}) diverged"
        assert outs[f"{prefix}{i}"][0][-1].finish_reason == "length"
    engine.check_integrity()
    assert engine.pool.num_free_blocks == engine.pool.num_blocks
    return outs


def test_llama_mixed_batch(llama_dir):
    path, model = llama_dir
    engine = LLMEngine(path, block_size=8)
    # 10 sequences with spread-out lengths: prefills and then decodes attend in several groups
    _check(engine, model, random_prompts([1, 7, 8, 9, 30, 64, 3, 5, 150, 200], 384))


def test_llama_many_context_groups(llama_dir):
    """Evenly spread contexts: decodes run in three or four attention groups."""
    from engine.model_runner import split_by_context

    path, model = llama_dir
    engine = LLMEngine(path, block_size=4)
    prompts = random_prompts(list(range(4, 244, 15)), 384, seed=30)
    for i, p in enumerate(prompts):
        engine.add_request(f"g{i}", p, GREEDY)
    engine.step()  # all prefills; from here on every step is 16 decodes
    running = [ScheduledChunk(s, 1) for s in engine.scheduler.running]
    assert len(split_by_context(running)) >= 3
    outs = run_to_completion(engine)
    for i, p in enumerate(prompts):
        assert outs[f"g{i}"][0][-1].finished
        assert tokens_of(outs[f"g{i}"][0]) == hf_greedy(model, p, MAX_NEW)[1:], f"prompt {i} diverged"


def test_split_by_context_groups_short_and_long():
    from engine.model_runner import split_by_context
    from engine.sequence import Sequence

    def seq(num_blocks):
        s = Sequence("x", 0, [1], SamplingParams())
        s.block_ids = list(range(num_blocks))
        return ScheduledChunk(s, 1)

    spread = [seq(n) for n in (1, 30, 2, 1, 2, 28, 1, 2, 1, 1)]
    groups = split_by_context(spread)
    assert [sorted(len(c.seq.block_ids) for c in g) for g in groups] == [[1, 1, 1, 1, 1, 2, 2, 2], [28, 30]]
    even = [seq(n) for n in (10, 11, 10, 12, 11, 10, 12, 10)]
    assert split_by_context(even) == [even]
    assert split_by_context(spread[:5]) == [spread[:5]]
    from engine.model_runner import split_prefills

    chunks = [ScheduledChunk(spread[0].seq, n) for n in (5, 400, 8, 380, 6)]
    assert [sorted(c.num_tokens for c in g) for g in split_prefills(chunks)] == [[5, 6, 8], [380, 400]]
    uniform = [seq(n) for n in range(2, 42)]  # evenly spread: several groups pay off
    groups = split_by_context(uniform)
    assert len(groups) >= 3 and sum(len(g) for g in groups) == 40
    assert all(
        max(len(c.seq.block_ids) for c in a) <= min(len(c.seq.block_ids) for c in b) for a, b in zip(groups, groups[1:])
    )


def test_llama_chunked_prefill(llama_dir):
    path, model = llama_dir
    engine = LLMEngine(path, block_size=8, max_num_batched_tokens=16)
    _check(engine, model, random_prompts([5, 37, 50, 3], 384, seed=1))


def test_llama_prefix_cache_hits(llama_dir):
    path, model = llama_dir
    engine = LLMEngine(path, block_size=8)
    shared = random_prompts([40], 384, seed=2)[0]
    _check(engine, model, [shared + [11, 12, 13]], prefix="warm")
    tails = random_prompts([3, 9, 0, 17], 384, seed=3)
    prompts = [shared + t for t in tails] + [shared[:16]]  # an exact block-aligned cached prompt too
    outs = _check(engine, model, prompts, prefix="hit")
    cached = [outs[f"hit{i}"][0][0].num_cached_tokens for i in range(len(prompts))]
    assert cached[:4] == [40, 40, 32, 40]  # 40 shared tokens = 5 full blocks; prompt of exactly 40 keeps 1 to compute
    assert cached[4] == 8  # never the whole prompt
    assert engine.stats().prefix_hit_rate > 0


def test_llama_forced_preemption(llama_dir):
    path, model = llama_dir
    engine = LLMEngine(path, block_size=4, num_blocks=24)
    _check(engine, model, random_prompts([20, 25, 18, 30], 384, seed=4))
    assert engine.stats().preemptions_total > 0


def test_qwen2_bias_gqa_tied(qwen2_dir):
    path, model = qwen2_dir
    engine = LLMEngine(path, block_size=16, max_num_batched_tokens=24)
    _check(engine, model, random_prompts([2, 19, 33, 48], 384, seed=5))


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "linear", "factor": 2.0, "rope_theta": 5000.0},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
            "rope_theta": 500000.0,
        },
    ],
)
def test_llama_rope_scaling(tmp_path, rope):
    model = build_tiny_model(tmp_path, "llama", rope_parameters=rope, seed=6)
    engine = LLMEngine(str(tmp_path), block_size=8)
    _check(engine, model, random_prompts([10, 60], 384, seed=7))


def test_mistral(tmp_path):
    model = build_tiny_model(tmp_path, "mistral", num_heads=4, num_kv_heads=1, head_dim=16, seed=8)
    engine = LLMEngine(str(tmp_path), block_size=8)
    _check(engine, model, random_prompts([6, 25], 384, seed=9))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_runs_close_to_fp32(llama_dir, dtype):
    """Half precision cannot match fp32 token for token; its first greedy token nearly always does."""
    path, model = llama_dir
    engine = LLMEngine(path, dtype=dtype, block_size=8)
    prompts = random_prompts([10, 20, 30, 40], 384, seed=10)
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    outs = run_to_completion(engine)
    firsts = [tokens_of(outs[str(i)][0])[0] for i in range(len(prompts))]
    refs = [hf_greedy(model, p, 1)[0] for p in prompts]
    assert sum(a == b for a, b in zip(firsts, refs)) >= 3
    assert all(len(tokens_of(outs[str(i)][0])) == 4 for i in range(len(prompts)))


def test_kv_budget_sizes_the_pool(llama_dir):
    path, _ = llama_dir
    # 2 layers * (K+V) * block 8 * 1 KV head * head_dim 32 * 4 bytes = 4096 bytes per block
    engine = LLMEngine(path, block_size=8, kv_cache_bytes=4096 * 10 + 100)
    assert engine.pool.num_blocks == 10
    assert engine.runner.kv_caches[0][0].shape == (80, 1, 32)
    assert len(engine.runner.kv_caches) == 2
