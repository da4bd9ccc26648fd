"""gateway/openai/responses/conversation.py details: a refusal part becomes the chat
message's text, an output without its call and an empty conversation are refused
with their whole messages, and history's calls answer the new outputs."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.openai.responses.conversation import build_generation
from gateway.openai.responses.request import parse_request


def generation(body: dict, history: list | None = None):
    return build_generation(parse_request({"model": "m", **body}), history or [], request_id="r", tenant=None)


def test_refusal_parts_become_the_assistant_text():
    gen = generation(
        {
            "input": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
                {
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "a"}, {"type": "refusal", "refusal": "b"}],
                },
            ]
        }
    )
    assert gen.messages[1:] == [
        {"role": "assistant", "content": "no"},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]


def test_an_output_without_its_call_and_an_empty_conversation_are_refused_by_name():
    with pytest.raises(GatewayError) as info:
        generation({"input": [{"type": "function_call_output", "call_id": "zz", "output": "x"}]})
    err = info.value
    assert (err.message, err.param) == (
        "No function call found for the function_call_output with call_id 'zz'.",
        "input[0].call_id",
    )
    with pytest.raises(GatewayError) as info:
        generation({})
    assert info.value.message == (
        "'input' is required: a string or a non-empty array of input items (or a 'previous_response_id' to continue)."
    )
    assert info.value.param == "input"


def test_a_call_in_the_history_answers_a_new_output():
    history = parse_request(
        {"model": "m", "input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]}
    ).input_items
    gen = generation({"input": [{"type": "function_call_output", "call_id": "c1", "output": "ok"}]}, history)
    assert gen.messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "ok"}


def test_no_top_logprobs_asked_is_zero_alternatives():
    assert generation({"input": "hi"}).sampling.top_logprobs == 0
    assert generation({"input": "hi", "top_logprobs": 0}).sampling.top_logprobs == 0
    logprobs = ["message.output_text.logprobs"]
    assert generation({"input": "hi", "top_logprobs": 2, "include": logprobs}).sampling.top_logprobs == 2
