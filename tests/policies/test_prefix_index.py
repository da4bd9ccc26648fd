"""The approximate prefix index: prompts cut into chained blocks, an LRU set per
backend, matches counted from the first block."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.base import GenerationRequest
from policies.prefix_index import BLOCK_CHARS, BLOCK_TOKENS, MAX_BLOCKS, PrefixIndex, prompt_blocks, rendered_prompt

SYSTEM = "You are a careful assistant who answers in full sentences. " * 8  # 472 characters


def chat(*turns: str, tools=None) -> GenerationRequest:
    messages = [{"role": "system", "content": SYSTEM}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)
    ]
    return GenerationRequest("r", "m", messages=messages, tools=tools)


def test_blocks_are_full_chunks_of_the_rendered_prompt_chained():
    req = chat("What is the capital of France?")
    text = rendered_prompt(req)
    blocks = prompt_blocks(req)
    assert len(blocks) == len(text) // BLOCK_CHARS
    # Same prefix, same leading names; the first difference changes every name after it.
    spain = chat("What is the capital of Spain?")
    other = prompt_blocks(spain)
    shared = len(os.path.commonprefix([text, rendered_prompt(spain)])) // BLOCK_CHARS
    assert shared >= 7 and blocks[:shared] == other[:shared]
    assert all(x != y for x, y in zip(blocks[shared:], other[shared:]))
    # Chained: the same chunk after a different history (or at another place) gets another name.
    xx = prompt_blocks(GenerationRequest("r", "m", prompt="x" * 128))
    yx = prompt_blocks(GenerationRequest("r", "m", prompt="y" * 64 + "x" * 64))
    assert xx[1] != yx[1] and xx[0] != xx[1]


def test_a_conversation_extends_its_own_blocks():
    first_turn = prompt_blocks(chat("Tell me about the sea."))
    next_turn = prompt_blocks(chat("Tell me about the sea.", "The sea is large.", "And the sky?"))
    assert next_turn[: len(first_turn) - 1] == first_turn[:-1]


def test_tools_lead_the_rendered_prompt_like_a_chat_template():
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    assert rendered_prompt(chat("hi", tools=tools)).startswith('[{"type":"function"')
    assert prompt_blocks(chat("hi", tools=tools))[0] != prompt_blocks(chat("hi"))[0]


def test_token_id_prompts_are_cut_into_blocks_of_tokens():
    ids = list(range(100))
    blocks = prompt_blocks(GenerationRequest("r", "m", kind="completion", prompt=ids))
    assert len(blocks) == 100 // BLOCK_TOKENS
    assert blocks[:3] == prompt_blocks(GenerationRequest("r", "m", kind="completion", prompt=ids[:48]))


def test_long_prompts_are_named_by_their_head_only():
    assert len(prompt_blocks(GenerationRequest("r", "m", prompt="z" * (BLOCK_CHARS * MAX_BLOCKS * 2)))) == MAX_BLOCKS
    assert prompt_blocks(GenerationRequest("r", "m", prompt="short")) == []


def test_match_counts_leading_blocks_held():
    index = PrefixIndex()
    a = prompt_blocks(chat("first question, a long one to fill a few blocks of text here"))
    index.record(a)
    assert index.match(a) == len(a)
    second = chat("second question, quite different from the other one")
    b = prompt_blocks(second)
    common = os.path.commonprefix([rendered_prompt(chat("first question")), rendered_prompt(second)])
    assert index.match(b) == len(common) // BLOCK_CHARS > 0  # the system prompt's blocks
    assert PrefixIndex().match(a) == 0


def test_memory_is_bounded_and_tails_go_before_heads():
    index = PrefixIndex(capacity=10)
    a = list(range(100, 108))  # 8 blocks
    index.record(a)
    index.record(list(range(200, 206)))  # 6 more: 4 of a's go, from its tail
    assert len(index) == 10
    assert index.match(a) == 4
    with pytest.raises(ValueError):
        PrefixIndex(capacity=0)


@settings(max_examples=60, deadline=None)
@given(
    chains=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 12)), min_size=1, max_size=30),
    capacity=st.integers(1, 40),
)
def test_held_chains_stay_prefix_closed_so_binary_search_is_exact(chains, capacity):
    # Chains share heads (the same root, different lengths), as prompts sharing a system prompt do.
    index = PrefixIndex(capacity)
    prompts = [[root * 1000 + i for i in range(length)] for root, length in chains]
    for p in prompts:
        index.record(p)
    for p in prompts:
        linear = next((i for i, name in enumerate(p) if name not in index._blocks), len(p))
        assert index.match(p) == linear
