"""engine/model_runner.py's own arithmetic on a tiny model built once per module: the dtype names,
the KV pool's size from a byte budget (at, below and above one block) or the default, a block copy,
a step that samples nothing, half precision end to end, and the grouping of a step's chunks (the
size boundaries and the cost of each split). The logits themselves are test_model_mutants.py's."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from engine.llm_engine import LLMEngine
from engine.model_runner import DEFAULT_KV_CACHE_BYTES, parse_dtype, split_by_context, split_padded, split_prefills
from engine.sampling_params import SamplingParams
from tests.engine.conftest import build_tiny_model, random_prompts
from tests.engine.test_model_mutants import SMALL, VOCAB, run_and_compare

# 2 layers x (K + V) x 4 slots x 2 KV heads x head_dim 8 x 4 bytes (fp32)
BLOCK_BYTES = 2 * 2 * 4 * 2 * 8 * 4


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> tuple[str, torch.nn.Module]:
    path = tmp_path_factory.mktemp("runner_llama")
    return str(path), build_tiny_model(path, "llama", seed=21, **SMALL)


def test_dtype_names():
    names = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16"}
    names |= {"float16": "float16", "fp16": "float16", "half": "float16"}
    for name, dtype in names.items():
        assert parse_dtype(name) is getattr(torch, dtype)
    with pytest.raises(ValueError) as caught:
        parse_dtype("fp8")
    assert str(caught.value) == (
        "unsupported dtype 'fp8'; use one of ['bf16', 'bfloat16', 'float16', 'float32', 'fp16', 'fp32', 'half']"
    )


def test_the_pool_holds_what_the_byte_budget_buys(llama):
    path = llama[0]
    assert LLMEngine(path, block_size=4, kv_cache_bytes=BLOCK_BYTES * 10 + BLOCK_BYTES - 1).runner.num_blocks == 10
    assert LLMEngine(path, block_size=4, kv_cache_bytes=BLOCK_BYTES).runner.num_blocks == 1
    # half precision: half the bytes per block
    assert LLMEngine(path, dtype="bf16", block_size=4, kv_cache_bytes=BLOCK_BYTES * 3).runner.num_blocks == 6
    with pytest.raises(ValueError) as caught:
        LLMEngine(path, block_size=4, kv_cache_bytes=BLOCK_BYTES - 1)
    assert str(caught.value) == f"kv_cache_bytes={BLOCK_BYTES - 1} is smaller than one block ({BLOCK_BYTES} bytes)"
    runner = LLMEngine(path, block_size=4, num_blocks=7, kv_cache_bytes=1).runner  # a block count wins
    assert runner.num_blocks == 7 and len(runner.kv_caches) == 2
    assert all(
        t.shape == (28, 2, 8) and t.dtype == torch.float32 and not t.any() for kv in runner.kv_caches for t in kv
    )


def test_the_default_pool_fits_every_sequence_at_full_length_up_to_a_cap(llama):
    path = llama[0]
    # 3 sequences x ceil(10 / 4) blocks
    assert LLMEngine(path, block_size=4, max_num_seqs=3, max_model_len=10).runner.num_blocks == 9
    assert LLMEngine(path, block_size=4, max_num_seqs=3, max_model_len=12).runner.num_blocks == 9
    # bf16 blocks of 512 bytes: 2048 sequences of 128 blocks are the 128 MiB cap exactly; of 256, twice
    # that, capped; of 64, half (sized without allocating the pool)
    engine = LLMEngine(path, dtype="bf16", block_size=4, max_num_seqs=2, max_model_len=8)
    assert engine.runner.num_blocks == 4
    config = dataclasses.replace(engine.config, max_num_seqs=2048)
    assert DEFAULT_KV_CACHE_BYTES == 2048 * 128 * 512
    assert engine.runner._num_blocks(config, 512) == 2048 * 128
    assert engine.runner._num_blocks(config, 1024) == 2048 * 128
    assert engine.runner._num_blocks(config, 256) == 2048 * 64


def test_copy_block_copies_one_blocks_keys_and_values_in_every_layer(llama):
    runner = LLMEngine(llama[0], block_size=4, num_blocks=5).runner
    for layer, (k, v) in enumerate(runner.kv_caches):
        k.copy_(torch.arange(k.numel(), dtype=k.dtype).view(k.shape) + 1000 * layer)
        v.copy_(-torch.arange(v.numel(), dtype=v.dtype).view(v.shape) - 1000 * layer)
    before = [(k.clone(), v.clone()) for k, v in runner.kv_caches]
    runner.copy_block(1, 3)
    for (k, v), (k0, v0) in zip(runner.kv_caches, before):
        for got, old in ((k, k0), (v, v0)):
            assert torch.equal(got[12:16], old[4:8])
            assert torch.equal(got[:12], old[:12]) and torch.equal(got[16:], old[16:])


def test_a_step_that_completes_no_prompt_samples_nothing(llama):
    engine = LLMEngine(llama[0], block_size=4, max_num_batched_tokens=4)
    engine.add_request("a", random_prompts([10], VOCAB, seed=1)[0], SamplingParams(max_tokens=1))
    sched = engine.scheduler.schedule()
    out = engine.runner.execute(sched.scheduled)
    assert out.sampled == [] and out.logits.shape == (0, VOCAB)


def test_half_precision_runs_end_to_end(llama):
    engine = LLMEngine(llama[0], dtype="bfloat16", block_size=4)
    prompts = random_prompts([1, 9, 14], VOCAB, seed=2)
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))
    done = 0
    while engine.has_unfinished_requests():
        done += sum(o.finished for o in engine.step())
    assert done == 3
    assert {t.dtype for kv in engine.runner.kv_caches for t in kv} == {torch.bfloat16}
    states = engine.runner.last_token_states(prompts)
    assert states.dtype == torch.float32 and states.shape == (3, 32) and torch.isfinite(states).all()


def test_chunks_of_one_token_after_a_prompt_in_one_pass(llama):
    """Mixed in one pass: single-token prompts (decode-shaped) beside a long prefill, in two groups."""
    run_and_compare(*llama, random_prompts([1, 1, 25], VOCAB, seed=3), block_size=4)
    # prompts of two tokens: a prefill group whose longest query is 2
    run_and_compare(*llama, random_prompts([2, 2], VOCAB, seed=4), block_size=4)


def _decodes(blocks: list[int]) -> list:
    return [SimpleNamespace(seq=SimpleNamespace(block_ids=list(range(n))), num_tokens=1) for n in blocks]


def _prefills(lengths: list[int]) -> list:
    return [SimpleNamespace(num_tokens=n) for n in lengths]


def test_decodes_split_from_eight_on():
    spread = [1, 40, 1, 40, 1, 40, 1, 40]
    assert split_by_context(_decodes(spread[:7])) == [_decodes(spread[:7])]
    groups = split_by_context(_decodes(spread))
    assert [[len(c.seq.block_ids) for c in g] for g in groups] == [[1, 1, 1, 1], [40, 40, 40, 40]]
    assert split_by_context([]) == []


def test_prefills_split_from_two_on():
    assert split_prefills([]) == []
    one = _prefills([500])
    assert split_prefills(one) == [one]
    assert [[c.num_tokens for c in g] for g in split_prefills(_prefills([500, 3]))] == [[3], [500]]


def test_split_padded_weighs_padding_against_the_cost_of_a_group():
    size = int
    # one group: 2 x 3 = 6; two: 1 + 3 + cost. A tie keeps one group, in the items' own order.
    assert split_padded([3, 1], size, 2) == [[3, 1]]
    assert split_padded([3, 1], size, 1) == [[1], [3]]
    assert split_padded([3, 1], size, 3) == [[3, 1]]
    three = [1, 1, 1, 10, 10, 10, 100, 100, 100]
    # three equal groups: 3 + 30 + 300 + 2 x 5 = 343 beats the best cut (365) and four groups (537)
    assert split_padded(three[::-1], size, 5) == [[1, 1, 1], [10, 10, 10], [100, 100, 100]]
    # a cut after six: 60 + 300 + 45 = 405 beats three groups (333 + 90 = 423)
    assert split_padded(three, size, 45) == [[1, 1, 1, 10, 10, 10], [100, 100, 100]]
    # three groups cost 333 + 2 x cost, the cut 360 + cost: three below a cost of 27, a tie at 27 keeps the cut
    by_three = [[1, 1, 1], [10, 10, 10], [100, 100, 100]]
    assert split_padded(three, size, 20) == split_padded(three, size, 26) == by_three
    assert split_padded(three, size, 27) == split_padded(three, size, 28) == [[1, 1, 1, 10, 10, 10], [100, 100, 100]]
    four = [1, 1, 10, 10, 100, 100, 1000, 1000]
    # four equal groups: 2222 + 3 beats three (3232) and the best cut (2601)
    assert split_padded(four[::-1], size, 1) == [[1, 1], [10, 10], [100, 100], [1000, 1000]]
    # never more than four groups, even where five would pad less
    assert len(split_padded([1, 2, 4, 8, 16, 32, 64, 128, 256, 512], size, 0)) == 4
    assert split_padded([5], size, 0) == [[5]]
