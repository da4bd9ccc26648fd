"""gateway/openai/responses/input_items.py item by item: each accepted form's whole
canonical item (what GET .../input_items returns: a fresh id of its type, status
`completed`), and each refusal's whole message, param and code."""

from __future__ import annotations

import re

import pytest

from adapters.errors import GatewayError
from gateway.openai.responses.input_items import parse_input

U = "unsupported_parameter"
CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}


def without_id(item: dict, prefix: str) -> dict:
    assert re.fullmatch(prefix + r"_[0-9a-f]{48}", item["id"]), item["id"]
    return {k: v for k, v in item.items() if k != "id"}


def test_a_string_and_a_user_message_are_input_text_messages():
    expected = {
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": "hi"}],
    }
    assert [without_id(i, "msg") for i in parse_input("hi")] == [expected]
    assert [without_id(i, "msg") for i in parse_input([{"role": "user", "content": "hi"}])] == [expected]
    parts = [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]
    (item,) = parse_input([{"type": "message", "role": "developer", "content": parts}])
    assert without_id(item, "msg") == {"type": "message", "role": "developer", "status": "completed", "content": parts}
    assert parse_input(None) == [] and parse_input([]) == []


def test_an_assistant_message_takes_output_text_input_text_and_refusal_parts():
    parts = [
        {"type": "output_text", "text": "a"},
        {"type": "input_text", "text": "b"},
        {"type": "refusal", "refusal": "no"},
    ]
    (item,) = parse_input([{"role": "assistant", "content": parts}])
    assert without_id(item, "msg") == {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "a", "annotations": []},
            {"type": "output_text", "text": "b", "annotations": []},
            {"type": "refusal", "refusal": "no"},
        ],
    }
    (text,) = parse_input([{"role": "assistant", "content": "ok"}])
    assert text["content"] == [{"type": "output_text", "text": "ok", "annotations": []}]


def test_a_function_call_and_its_output():
    call, empty_args, output, parts = parse_input(
        [
            CALL,
            {**CALL, "call_id": "c2", "arguments": ""},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "t"}]},
        ]
    )
    assert without_id(call, "fc") == {**CALL, "status": "completed"}
    assert empty_args["arguments"] == ""  # arguments may be empty, unlike the names
    assert without_id(output, "fco") == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": "sunny",
        "status": "completed",
    }
    assert parts["output"] == [{"type": "input_text", "text": "t"}]


REFUSALS = [
    (3, "'input' must be a string or an array of input items.", "input", None),
    ([3], "'input[0]' must be an object.", "input[0]", None),
    ([{"type": "reasoning"}], "'input[0]': reasoning items are not supported by this gateway.", "input[0].type", U),
    ([{}], "'input[0].type' is required and must be a string.", "input[0].type", None),
    (
        [{"type": "image"}],
        "'input[0].type' 'image' is not supported by this gateway; supported input items: message, "
        "function_call, function_call_output.",
        "input[0].type",
        U,
    ),
    (
        [{"type": "message", "role": "tool", "content": "x"}],
        "'input[0].role' must be one of 'user', 'system', 'developer', 'assistant'; got 'tool'.",
        "input[0].role",
        None,
    ),
    (
        [{"role": "user", "content": []}],
        "'input[0].content' must be a string or a non-empty array of content parts.",
        "input[0].content",
        None,
    ),
    (
        [{"role": "user", "content": ["x"]}],
        "'input[0].content[0]' must be a content part object.",
        "input[0].content[0]",
        None,
    ),
    (
        [{"role": "user", "content": [{"type": "input_image"}]}],
        "'input[0].content[0]': input_image content is not supported by this gateway (text only).",
        "input[0].content[0].type",
        U,
    ),
    (
        [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}],
        "'input[0].content[0].type' must be input_text; got 'output_text'.",
        "input[0].content[0].type",
        None,
    ),
    (
        [{"role": "assistant", "content": [{"type": "input_file"}]}],
        "'input[0].content[0]': input_file content is not supported by this gateway (text only).",
        "input[0].content[0].type",
        U,
    ),
    (
        [{"role": "assistant", "content": [{"type": "image"}]}],
        "'input[0].content[0].type' must be output_text or refusal; got 'image'.",
        "input[0].content[0].type",
        None,
    ),
    (
        [{"role": "assistant", "content": ["x"]}],
        "'input[0].content[0]' must be a content part object.",
        "input[0].content[0]",
        None,
    ),
    (
        [{"role": "user", "content": [{"type": "input_text", "text": 3}]}],
        "'input[0].content[0].text' must be a string.",
        "input[0].content[0].text",
        None,
    ),
    (
        [{"role": "assistant", "content": [{"type": "output_text", "text": 3}]}],
        "'input[0].content[0].text' must be a string.",
        "input[0].content[0].text",
        None,
    ),
    (
        [{"role": "assistant", "content": [{"type": "refusal", "refusal": 3}]}],
        "'input[0].content[0].refusal' must be a string.",
        "input[0].content[0].refusal",
        None,
    ),
    (
        [{"type": "function_call", "name": "f", "arguments": "{}"}],
        "'input[0].call_id' is required and must be a non-empty string.",
        "input[0].call_id",
        None,
    ),
    (
        [{**CALL, "name": ""}],
        "'input[0].name' is required and must be a non-empty string.",
        "input[0].name",
        None,
    ),
    (
        [{"type": "function_call", "call_id": "c", "name": "f"}],
        "'input[0].arguments' is required and must be a string.",
        "input[0].arguments",
        None,
    ),
    (
        [{"type": "function_call_output", "call_id": "c", "output": []}],
        "'input[0].output' must be a string or a non-empty array of input_text parts.",
        "input[0].output",
        None,
    ),
    (
        [{"type": "function_call_output", "output": "x"}],
        "'input[0].call_id' is required and must be a non-empty string.",
        "input[0].call_id",
        None,
    ),
    (
        [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_audio"}]}],
        "'input[0].output[0]': input_audio content is not supported by this gateway (text only).",
        "input[0].output[0].type",
        U,
    ),
]


@pytest.mark.parametrize(("value", "message", "param", "code"), REFUSALS)
def test_each_refusal_says_what_is_wrong_and_where(value, message, param, code):
    with pytest.raises(GatewayError) as info:
        parse_input(value)
    err = info.value
    assert (err.status, err.message, err.param, err.code) == (400, message, param, code)
