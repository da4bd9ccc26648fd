"""engine/llm_engine.py on a tiny model built once per module: the context length it settles on, each
refusal of add_request with its words at, below and above its bound, what a step returns and counts,
the grammar prefetch hook, the forking of n choices (with and without a block to copy into), when a
choice stops, the embeddings path, the stats and the integrity check's findings."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from engine.llm_engine import ContextLengthError, LLMEngine
from engine.pooling import PoolingInputError
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence
from tests.engine.conftest import build_tiny_model, random_prompts, run_to_completion, tokens_of
from tests.engine.test_model_mutants import SMALL, VOCAB

MAX_POS = 48
EOS = 2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[str, torch.nn.Module]:
    path = tmp_path_factory.mktemp("engine_llama")
    return str(path), build_tiny_model(path, "llama", seed=31, max_position_embeddings=MAX_POS, **SMALL)


def greedy(max_tokens: int = 3, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, **kw)


def forced(token: int, max_tokens: int = 3, **kw) -> SamplingParams:
    return greedy(max_tokens, logit_bias={token: 100.0}, **kw)


def test_the_context_length_is_the_least_of_the_asked_the_models_and_its_window(tiny, tmp_path):
    path = tiny[0]
    assert LLMEngine(path).max_model_len == MAX_POS
    assert LLMEngine(path, max_model_len=20).max_model_len == 20
    assert LLMEngine(path, max_model_len=MAX_POS + 1).max_model_len == MAX_POS
    shutil.copytree(path, tmp_path / "w")
    config = json.loads((tmp_path / "w" / "config.json").read_text())
    (tmp_path / "w" / "config.json").write_text(json.dumps(config | {"use_sliding_window": True, "sliding_window": 30}))
    assert LLMEngine(str(tmp_path / "w")).max_model_len == 30
    assert LLMEngine(str(tmp_path / "w"), max_model_len=25).max_model_len == 25
    engine = LLMEngine(path)
    assert engine.eos_token_ids == {EOS} and not engine.model_config.is_matryoshka
    assert LLMEngine(path, matryoshka=True).model_config.is_matryoshka


def test_add_request_refusals(tiny):
    engine = LLMEngine(tiny[0], block_size=4, num_blocks=3)

    def refused(exc, prompt, params, words=None):
        with pytest.raises(exc) as caught:
            engine.add_request("x", prompt, params)
        if words is not None:
            assert str(caught.value) == words
        assert not engine.has_unfinished_requests()

    refused(ValueError, [5], SamplingParams(temperature=-1.0))
    refused(ValueError, [], SamplingParams(max_tokens=1), "the prompt must contain at least one token")
    for ids in ([-1, 5], [5, VOCAB]):
        refused(ValueError, ids, SamplingParams(max_tokens=1), f"prompt token ids must be in [0, {VOCAB})")
    for bias in ({VOCAB: 1.0}, {-1: 1.0}):
        refused(
            ValueError,
            [5],
            SamplingParams(max_tokens=1, logit_bias=bias),
            f"logit_bias token ids must be in [0, {VOCAB})",
        )
    # 3 blocks of 4: 12 tokens fit, 13 do not
    refused(
        ContextLengthError,
        [5] * 10,
        SamplingParams(max_tokens=3),
        "the request needs 13 tokens of KV cache but the engine holds only 12",
    )
    engine.add_request("fits", [0, VOCAB - 1] * 5, SamplingParams(max_tokens=2, logit_bias={0: 1.0, VOCAB - 1: 1.0}))
    with pytest.raises(ValueError) as caught:
        engine.add_request("fits", [5], SamplingParams(max_tokens=1))
    assert str(caught.value) == "request id 'fits' is already running"

    roomy = LLMEngine(tiny[0], block_size=4)
    with pytest.raises(ContextLengthError) as caught:
        roomy.add_request("long", [5] * 40, SamplingParams(max_tokens=MAX_POS - 39))
    assert str(caught.value) == (
        f"this model's maximum context length is {MAX_POS} tokens, but the request needs {MAX_POS + 1} "
        f"(40 prompt + {MAX_POS - 39} max_tokens)"
    )
    roomy.add_request("long", [5] * 40, SamplingParams(max_tokens=MAX_POS - 40))
    assert roomy.has_unfinished_requests()


def test_a_step_returns_each_new_token_and_counts_its_work(tiny):
    engine = LLMEngine(tiny[0], block_size=4)
    assert engine.step() == [] and engine.stats().last_batch_tokens == 0
    assert 0 <= engine.stats().last_step_s < 1
    prompts = random_prompts([9, 5], VOCAB, seed=1)
    engine.add_request("a", prompts[0], forced(7, logprobs=2))
    engine.add_request("b", prompts[1], forced(8))
    outs = engine.step()
    assert [(o.request_id, o.index, o.token_ids, o.finished, o.finish_reason) for o in outs] == [
        ("a", 0, [7], False, None),
        ("b", 0, [8], False, None),
    ]
    assert [(o.num_prompt_tokens, o.num_cached_tokens) for o in outs] == [(9, 0), (5, 0)]
    (logprob,) = outs[0].logprobs
    assert logprob[1][0][0] == 7 and len(logprob[1]) == 2 and logprob[0] == logprob[1][0][1]
    assert outs[1].logprobs is None
    stats = engine.stats()
    assert stats.last_batch_tokens == 14 and 0 < stats.last_step_s < 5 and stats.running == 2
    assert engine.requests["a"].seqs[0].num_computed_tokens == 9
    run_to_completion(engine)
    # the full blocks were cached as computed: the same prompt again starts from them
    engine.add_request("again", prompts[0], forced(7, max_tokens=1))
    (out,) = engine.step()
    assert out.num_cached_tokens == 8 and out.finished and out.finish_reason == "length"
    stats = engine.stats()
    assert (stats.prefix_query_tokens, stats.prefix_hit_tokens) == (23, 8)
    assert stats.prefix_hit_rate == 8 / 23 and stats.waiting == 0 and stats.running == 0
    assert stats.num_free_blocks == stats.num_blocks == engine.pool.num_blocks and stats.preemptions_total == 0
    assert stats.kv_usage == engine.kv.usage


class Hook:
    """An allowed_tokens_fn with a prefetch: records what it was asked, shares one starter."""

    def __init__(self, starter) -> None:
        self.prefetched: list[list[int]] = []
        self.starter = starter

    def __call__(self, output_ids):
        return None

    def prefetch(self, output_ids):
        self.prefetched.append(list(output_ids))
        return self.starter


def test_grammar_masks_are_prefetched_once_a_prompt_is_computed_and_started_once_a_step(tiny):
    started: list[int] = []
    hook = Hook(lambda: started.append(1))
    quiet = Hook(None)
    engine = LLMEngine(tiny[0], block_size=4, max_num_batched_tokens=8)
    prompts = random_prompts([3, 3, 10], VOCAB, seed=2)
    engine.add_request("a", prompts[0], forced(9, allowed_tokens_fn=hook))
    engine.add_request("b", prompts[1], forced(9, allowed_tokens_fn=hook))
    engine.add_request("c", prompts[2], forced(9, max_tokens=1, allowed_tokens_fn=quiet))
    engine.step()  # a and b whole, c's first 2 tokens: c asks nothing yet
    assert hook.prefetched == [[], []] and started == [1] and quiet.prefetched == []
    engine.step()  # a's and b's decodes, 6 more of c's tokens
    assert hook.prefetched == [[], [], [9], [9]] and started == [1, 1] and quiet.prefetched == []
    engine.step()  # a's and b's last decodes, c's last 2 tokens
    assert hook.prefetched == [[], [], [9], [9], [9, 9], [9, 9]] and started == [1, 1, 1]
    assert quiet.prefetched == [[]]


def test_n_choices_fork_from_the_prefill_with_their_own_seeds(tiny):
    engine = LLMEngine(tiny[0], block_size=4)
    prompt = random_prompts([10], VOCAB, seed=3)[0]  # a partial last block: copied for each choice
    engine.add_request("warm", prompt, greedy(1))
    run_to_completion(engine)
    engine.add_request("n", prompt, greedy(4, n=3, seed=40, ignore_eos=True))
    first = engine.step()
    assert [(o.index, o.num_cached_tokens) for o in first] == [(0, 8), (1, 8), (2, 8)]
    seqs = engine.requests["n"].seqs
    assert [s.generator.initial_seed() for s in seqs] == [40, 41, 42]
    assert all(s.admitted and s.arrival == seqs[0].arrival for s in seqs)
    outs = run_to_completion(engine)["n"]
    choices = [[o.token_ids[0] for o in first if o.index == i] + tokens_of(outs[i]) for i in range(3)]
    engine.add_request("one", prompt, greedy(4, ignore_eos=True))
    assert choices == [tokens_of(run_to_completion(engine)["one"][0])] * 3
    assert engine.pool.num_free_blocks == engine.pool.num_blocks
    engine.add_request("unseeded", prompt, greedy(1))
    assert engine.requests["unseeded"].seqs[0].generator is None


def test_a_choice_without_a_block_to_fork_into_is_computed_again(tiny):
    engine = LLMEngine(tiny[0], block_size=4, num_blocks=3)
    prompt = random_prompts([10], VOCAB, seed=4)[0]
    engine.add_request("n", prompt, greedy(2, n=2, ignore_eos=True))
    first = engine.step()
    assert sorted(o.index for o in first) == [0, 1]
    assert len(engine.scheduler.running) == 1 and len(engine.scheduler.waiting) == 1
    engine.check_integrity()
    outs = run_to_completion(engine)["n"]
    assert engine.requests == {} and all(outs[i][-1].finish_reason == "length" for i in range(2))
    choices = [[o.token_ids[0] for o in first if o.index == i] + tokens_of(outs[i]) for i in range(2)]
    assert choices[0] == choices[1] and len(choices[0]) == 2


def test_a_request_ends_when_its_last_choice_does(tiny):
    engine = LLMEngine(tiny[0], block_size=4)
    engine.add_request("n", [5, 6, 7], forced(11, max_tokens=2, n=2))
    engine.step()
    assert engine.requests["n"].num_unfinished == 2
    engine.abort_request("missing")
    outs = engine.step()
    assert [o.finish_reason for o in outs] == ["length", "length"] and "n" not in engine.requests


def _stopper(engine: LLMEngine, params: SamplingParams, prompt_len: int = 3) -> Sequence:
    engine.add_request("s", [5] * prompt_len, params)
    return engine.requests["s"].seqs[0]


def test_when_a_choice_stops(tiny):
    engine = LLMEngine(tiny[0], block_size=4, max_model_len=16)
    seq = _stopper(engine, SamplingParams(max_tokens=5, stop_token_ids=[9], min_tokens=2))
    out = engine._append_token(seq, 9, None)  # a stop token before min_tokens: kept going
    assert (out.finished, out.finish_reason, seq.finish_reason) == (False, None, None)
    out = engine._append_token(seq, EOS, (-0.5, []))
    assert (out.finished, out.finish_reason, out.token_ids, out.logprobs) == (True, "stop", [EOS], [(-0.5, [])])
    assert seq.finish_reason == "stop" and "s" not in engine.requests and seq not in engine.scheduler.waiting
    seq = _stopper(engine, SamplingParams(max_tokens=2, ignore_eos=True))
    assert engine._append_token(seq, EOS, None).finish_reason is None  # EOS ignored
    assert engine._append_token(seq, 4, None).finish_reason == "length"  # max_tokens reached
    seq = _stopper(engine, SamplingParams(max_tokens=2, stop_token_ids=[4], ignore_eos=True))
    assert engine._append_token(seq, 4, None).finish_reason == "stop"  # a stop token even with EOS ignored
    # the context length ends a choice whatever its max_tokens (one made past add_request's check)
    seq = Sequence("c", 0, [5] * 14, SamplingParams(max_tokens=10))
    engine.scheduler.add(seq)
    assert engine._append_token(seq, 4, None).finish_reason is None
    assert engine._append_token(seq, 4, None).finish_reason == "length"


def test_abort_ends_unfinished_choices_only(tiny):
    engine = LLMEngine(tiny[0], block_size=4)
    engine.add_request("a", [5, 6], forced(7, max_tokens=4, n=2))
    engine.step()
    first, second = engine.requests["a"].seqs
    engine._append_token(second, 7, None)
    engine._append_token(second, 7, None)
    engine._append_token(second, 7, None)
    assert second.finish_reason == "length"
    engine.abort_request("a")
    assert (first.finish_reason, second.finish_reason) == ("abort", "length")
    assert not engine.has_unfinished_requests() and not engine.scheduler.running
    assert engine.pool.num_free_blocks == engine.pool.num_blocks


def test_embeddings(tiny):
    path, hf = tiny
    engine = LLMEngine(path, block_size=4, max_num_batched_tokens=10)
    prompts = random_prompts([4, 6, 1], VOCAB, seed=5)
    assert engine.embedding_batches(prompts) == [prompts[:2], prompts[2:]]
    with pytest.raises(PoolingInputError):
        engine.check_embedding_inputs([])
    with pytest.raises(PoolingInputError):
        engine.embed([[5] * (MAX_POS + 1)])
    with torch.no_grad():
        states = torch.stack([hf.model(torch.tensor([p])).last_hidden_state[0, -1] for p in prompts])
    got = torch.tensor(engine.embed(prompts))
    assert torch.allclose(got, torch.nn.functional.normalize(states), atol=1e-5)
    cut = torch.tensor(engine.embed_batch(prompts[:2], 8))
    assert cut.shape == (2, 8) and torch.allclose(cut, torch.nn.functional.normalize(states[:2, :8]), atol=1e-5)


def test_the_integrity_check_finds_a_miscounted_block_and_a_waiting_holder(tiny):
    engine = LLMEngine(tiny[0], block_size=4)
    engine.add_request("a", [5] * 6, forced(7))
    engine.step()
    engine.check_integrity()
    block = engine.pool.blocks[engine.requests["a"].seqs[0].block_ids[0]]
    block.ref_count += 1
    with pytest.raises(AssertionError) as caught:
        engine.check_integrity()
    assert str(caught.value) == f"block {block.block_id}: ref_count 2 but held 1 times"
    block.ref_count -= 1
    engine.add_request("b", [5] * 3, forced(7))
    waiting = engine.scheduler.waiting[0]
    waiting.blocks = [block]
    with pytest.raises(AssertionError) as caught:
        engine.check_integrity()
    assert str(caught.value) == f"waiting {waiting} holds blocks"


def test_the_engines_settings_and_a_fresh_engines_stats(tiny, tmp_path):
    from engine.config import EngineConfig

    path = tiny[0]
    assert LLMEngine(path).config == EngineConfig(model_dir=path)
    assert EngineConfig(model_dir=path) == EngineConfig(path, "float32", "cpu", 16, None, None, 64, 2048, None, True, 0)
    asked = dict(dtype="bf16", block_size=8, kv_cache_bytes=10**6, max_num_seqs=3, max_num_batched_tokens=20)
    asked |= dict(max_model_len=30, enable_prefix_caching=False, seed=5)
    engine = LLMEngine(path, **asked)
    assert engine.config == EngineConfig(model_dir=path, device="cpu", num_blocks=None, **asked)
    stats = engine.stats()
    assert (stats.last_step_s, stats.last_batch_tokens, stats.prefix_hit_rate) == (0.0, 0, 0.0)
    # without the prefix cache the same prompt is computed again
    prompt = random_prompts([9], VOCAB, seed=6)[0]
    for rid in ("a", "b"):
        engine.add_request(rid, prompt, forced(7, max_tokens=1))
        assert [o.num_cached_tokens for o in engine.step()] == [0]
    # a window above the model's length does not lift it
    shutil.copytree(path, tmp_path / "w")
    config = json.loads((tmp_path / "w" / "config.json").read_text())
    (tmp_path / "w" / "config.json").write_text(json.dumps(config | {"use_sliding_window": True, "sliding_window": 90}))
    assert LLMEngine(str(tmp_path / "w"), max_model_len=60).max_model_len == MAX_POS


def test_priority_orders_the_waiting_and_forks_keep_it(tiny):
    engine = LLMEngine(tiny[0], block_size=4, max_num_seqs=1)
    engine.add_request("later", [5, 6], forced(7, max_tokens=1), priority=1)
    engine.add_request("default", [5, 6], forced(7, max_tokens=1))
    assert [o.request_id for o in engine.step()] == ["default"]
    engine = LLMEngine(tiny[0], block_size=4)
    engine.add_request("n", [5, 6, 7], forced(7, max_tokens=2, n=2), priority=3)
    engine.step()
    assert [s.priority for s in engine.requests["n"].seqs] == [3, 3]


def test_a_forked_request_beside_one_forking_now(tiny):
    """Choices already forked are not forked again, and do not stop the fork of a later request."""
    engine = LLMEngine(tiny[0], block_size=4)
    engine.add_request("a", [5, 6, 7], forced(7, max_tokens=4, n=2))
    engine.step()
    engine.add_request("b", [8, 9], forced(7, max_tokens=4, n=2))
    outs = engine.step()
    assert sorted((o.request_id, o.index) for o in outs) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert len(engine.requests["a"].seqs) == len(engine.requests["b"].seqs) == 2


def test_min_tokens_holds_back_eos_and_the_engine_seed_draws(tiny):
    engine = LLMEngine(tiny[0], block_size=4)
    engine.add_request("m", [5, 6], forced(EOS, max_tokens=6, min_tokens=2))
    toks = tokens_of(run_to_completion(engine)["m"][0])
    assert len(toks) == 3 and EOS not in toks[:2] and toks[2] == EOS

    def draws(seed: int) -> list[int]:
        seeded = LLMEngine(tiny[0], block_size=4, seed=seed)
        seeded.add_request("t", [5, 6], SamplingParams(max_tokens=12, temperature=5.0, ignore_eos=True))
        return tokens_of(run_to_completion(seeded)["t"][0])

    assert draws(5) == draws(5) != draws(0)


def test_embedding_dimensions_are_passed_on(tiny):
    path = tiny[0]
    prompts = random_prompts([3, 4], VOCAB, seed=7)
    with pytest.raises(PoolingInputError):
        LLMEngine(path).check_embedding_inputs(prompts, 8)
    with pytest.raises(PoolingInputError):
        LLMEngine(path).embed(prompts, 8)
    cut = LLMEngine(path, matryoshka=True).embed(prompts, 8)
    assert [len(v) for v in cut] == [8, 8]
    assert all(abs(sum(x * x for x in v) - 1) < 1e-5 for v in cut)


def test_the_integrity_check_names_a_block_no_sequence_holds(tiny):
    engine = LLMEngine(tiny[0], block_size=4)
    engine.add_request("a", [5] * 6, forced(7))
    engine.step()
    seq = engine.requests["a"].seqs[0]
    dropped = seq.block_ids.pop()
    with pytest.raises(AssertionError) as caught:
        engine.check_integrity()
    assert str(caught.value) == f"block {dropped}: ref_count 1 but held 0 times"
