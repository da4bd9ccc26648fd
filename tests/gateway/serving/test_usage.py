"""gateway/serving/usage.py: the usage estimated when the runtime sends none. Tokens,
not events: a delta's logprobs count one token each, exactly; text without them and a
tool call's name and arguments count their characters, four to a token, rounded up
over the whole answer (not per delta); the prompt is the sum of every request's
estimate."""

from __future__ import annotations

import pytest

from adapters.base import GenerationRequest, SamplingParams, TextDelta, TokenLogprob, ToolCallDelta, Usage
from gateway.openai.requests import estimate_prompt_tokens
from gateway.serving.usage import UsageCount


def request(prompt: str) -> GenerationRequest:
    return GenerationRequest(request_id="r", model="m", prompt=prompt, sampling=SamplingParams())


def logprobs(n: int) -> list[TokenLogprob]:
    return [TokenLogprob(token="t", logprob=-0.1) for _ in range(n)]


def counted(*events, requests=None) -> Usage:
    count = UsageCount(requests if requests is not None else [])
    for event in events:
        count.saw(event)
    return count.usage()


def test_nothing_seen_is_no_completion_tokens_and_no_prompt_without_requests() -> None:
    assert counted() == Usage(0, 0)


@pytest.mark.parametrize(("chars", "tokens"), [(0, 0), (1, 1), (3, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
def test_text_is_four_characters_a_token_rounded_up(chars, tokens) -> None:
    assert counted(TextDelta(0, "x" * chars)).completion_tokens == tokens


def test_characters_are_summed_over_deltas_before_rounding() -> None:
    # three deltas of 3 characters: 9 characters, 3 tokens (not 3 x 1)
    assert counted(*[TextDelta(0, "abc")] * 3).completion_tokens == 3


def test_logprobs_count_one_token_each_whatever_the_text() -> None:
    assert counted(TextDelta(0, "a long piece of text", logprobs(2))).completion_tokens == 2
    # empty logprobs: the text counts
    assert counted(TextDelta(0, "abcdefgh", [])).completion_tokens == 2


def test_exact_and_estimated_tokens_add_up() -> None:
    usage = counted(TextDelta(0, "xy", logprobs(3)), TextDelta(1, "abcde"), TextDelta(0, "q", logprobs(1)))
    assert usage.completion_tokens == 3 + 2 + 1


@pytest.mark.parametrize(
    ("delta", "tokens"),
    [
        (ToolCallDelta(0, 0, name="abcd", arguments="efgh"), 2),
        (ToolCallDelta(0, 0, name=None, arguments="abcde"), 2),
        (ToolCallDelta(0, 0, name="abcde", arguments=""), 2),
        (ToolCallDelta(0, 0, id="call_123456789", name=None, arguments="a"), 1),
    ],
)
def test_a_tool_call_counts_its_name_and_arguments(delta, tokens) -> None:
    assert counted(delta).completion_tokens == tokens


def test_tool_call_and_text_characters_are_rounded_together() -> None:
    assert counted(TextDelta(0, "abc"), ToolCallDelta(0, 0, name="d", arguments="e")).completion_tokens == 2
    assert counted(ToolCallDelta(0, 0, name="d", arguments="e"), TextDelta(0, "abc")).completion_tokens == 2


def test_a_tool_call_s_pieces_add_up() -> None:
    pieces = [ToolCallDelta(0, 0, name="fn", arguments='{"a'), ToolCallDelta(0, 0, arguments='": 1}')]
    assert counted(*pieces).completion_tokens == 3  # 2 + 3 + 5 characters


def test_the_prompt_is_every_request_estimated() -> None:
    requests = [request("a" * 40), request("b" * 9)]
    usage = counted(TextDelta(0, "abcd"), requests=requests)
    assert usage == Usage(estimate_prompt_tokens(requests[0]) + estimate_prompt_tokens(requests[1]), 1)
    assert usage.prompt_tokens == 11 + 3
