"""What a valid body becomes (gateway/openai/requests.py): every field the gateway reads
lands in the `GenerationRequest` the dispatcher sends, each range is open up to
its documented bound and closed just past it, and the defaults are OpenAI's."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.errors import GatewayError
from gateway.openai.requests import parse_chat, parse_completion

USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "f"}}]
MAX = 2**31  # the largest max_tokens (max_completion_tokens) a request may ask for


def chat(**fields: Any):
    return parse_chat({"model": "m", "messages": USER, **fields}, "rid")


def completions(**fields: Any):
    return parse_completion({"model": "m", "prompt": "hi", **fields}, "rid")


def refused(fn: Any, param: str) -> None:
    with pytest.raises(GatewayError) as info:
        fn()
    assert (info.value.status, info.value.param) == (400, param)


# ---- chat ------------------------------------------------------------------------------


def test_a_chat_request_carries_its_id_model_kind_and_session_keys():
    r = parse_chat({"model": "llama", "messages": USER, "user": "u1", "prompt_cache_key": "conv-7"}, "rid-1")
    assert (r.request_id, r.model, r.kind) == ("rid-1", "llama", "chat")
    assert r.session_keys == {"prompt_cache_key": "conv-7", "user": "u1"}


@pytest.mark.parametrize("value", ["", 7, ["u"]])
def test_a_session_key_that_is_not_a_non_empty_string_is_left_out(value):
    assert chat(user=value, prompt_cache_key="c").session_keys == {"prompt_cache_key": "c"}


@pytest.mark.parametrize("sent, kept", [(None, True), (True, True), (False, False)])
def test_parallel_tool_calls_defaults_to_true_and_keeps_what_was_sent(sent, kept):
    fields = {"tools": TOOLS} if sent is None else {"tools": TOOLS, "parallel_tool_calls": sent}
    assert chat(**fields).parallel_tool_calls is kept


@pytest.mark.parametrize("name", ["max_completion_tokens", "max_tokens"])
def test_the_token_limit_spans_one_to_two_to_the_31(name):
    assert chat(**{name: 1}).sampling.max_tokens == 1
    assert chat(**{name: MAX}).sampling.max_tokens == MAX
    refused(lambda: chat(**{name: MAX + 1}), name)


def test_max_tokens_beside_max_completion_tokens_is_held_to_the_same_range():
    assert chat(max_completion_tokens=5, max_tokens=1).sampling.max_tokens == 5
    assert chat(max_completion_tokens=5, max_tokens=MAX).sampling.max_tokens == 5
    refused(lambda: chat(max_completion_tokens=5, max_tokens=MAX + 1), "max_tokens")


def test_top_logprobs_may_be_zero_and_defaults_to_zero():
    r = chat(logprobs=True, top_logprobs=0)
    assert r.sampling.logprobs and r.sampling.top_logprobs == 0
    r = chat(logprobs=True)
    assert r.sampling.logprobs and r.sampling.top_logprobs == 0
    assert chat(logprobs=True, top_logprobs=3).sampling.top_logprobs == 3


# ---- legacy completions ---------------------------------------------------------------------


def test_one_prompt_keeps_the_request_id_and_a_batch_numbers_it():
    (one,) = completions()
    assert one.request_id == "rid"
    batch = completions(prompt=["a", "b", "c"])
    assert [r.request_id for r in batch] == ["rid-0", "rid-1", "rid-2"]


def test_every_prompt_of_a_batch_carries_the_request_fields():
    body = {
        "model": "llama",
        "prompt": ["a", "b"],
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "u1",
        "vendor_thing": 3,
    }
    batch = parse_completion(body, "rid")
    for r in batch:
        assert (r.model, r.kind, r.stream, r.include_usage, r.echo) == ("llama", "completion", True, True, False)
        assert (r.extra, r.session_keys) == ({"vendor_thing": 3}, {"user": "u1"})
    # each prompt has its own copies: one changed on its way does not change the others
    assert batch[0].extra is not batch[1].extra and batch[0].session_keys is not batch[1].session_keys
    (echoed,) = completions(echo=True)
    assert echoed.echo is True and echoed.stream is False


def test_max_tokens_is_read_when_sent_and_sixteen_when_not():
    (r,) = completions(max_tokens=50)
    assert r.sampling.max_tokens == 50
    (r,) = completions()
    assert r.sampling.max_tokens == 16
    (r,) = completions(max_tokens=MAX)
    assert r.sampling.max_tokens == MAX
    refused(lambda: completions(max_tokens=MAX + 1), "max_tokens")


def test_logprobs_zero_asks_for_the_chosen_tokens_only():
    (r,) = completions(logprobs=0)
    assert r.sampling.logprobs and r.sampling.top_logprobs == 0
    (r,) = completions()
    assert not r.sampling.logprobs and r.sampling.top_logprobs == 0


def test_n_spans_one_to_128_on_completions():
    assert completions(n=128)[0].sampling.n == 128
    refused(lambda: completions(n=129), "n")


@pytest.mark.parametrize("prompt", [[[1, True]], [["a"]], [[1], ["a"]]])
def test_token_id_arrays_hold_integers_only(prompt):
    refused(lambda: completions(prompt=prompt), "prompt")
