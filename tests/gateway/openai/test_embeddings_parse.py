"""gateway/openai/embeddings.py's reader: each refusal's message, the text estimate's
boundary at MAX_TOTAL_TOKENS (four characters a token plus one, per string, rounded
down), the encoding format, and what the call and the stand-in carry."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.errors import GatewayError
from gateway.openai.embeddings import _FORMS, MAX_INPUTS, MAX_TOTAL_TOKENS, parse_embeddings


def refused(body: dict[str, Any]) -> GatewayError:
    with pytest.raises(GatewayError) as exc:
        parse_embeddings({"model": "m", **body}, "rid")
    assert exc.value.status == 400
    return exc.value


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        ({}, f"'input' is required: {_FORMS}.", "input"),
        (
            {"input": "x", "encoding_format": "int8"},
            "'encoding_format' must be 'float' or 'base64'; got 'int8'.",
            "encoding_format",
        ),
        ({"input": "x", "user": 7}, "'user' must be a string.", "user"),
        ({"input": ""}, "'input' must not be an empty string.", "input"),
        ({"input": []}, f"'input' must be {_FORMS}, and not empty.", "input"),
        ({"input": {}}, f"'input' must be {_FORMS}, and not empty.", "input"),
        (
            {"input": ["a"] * (MAX_INPUTS + 1)},
            f"'input' may hold at most {MAX_INPUTS} items; got {MAX_INPUTS + 1}.",
            "input",
        ),
        ({"input": ["a", ""]}, "'input[1]' must not be an empty string.", "input"),
        ({"input": ["a", [1]]}, f"'input' must be {_FORMS}; arrays may not mix them or hold empty items.", "input"),
    ],
)
def test_each_refusal_says_what_and_where(body, message, param) -> None:
    e = refused(body)
    assert (e.message, e.param) == (message, param)


@pytest.mark.parametrize(
    ("chars", "estimate"),
    [((MAX_TOTAL_TOKENS - 1) * 4, MAX_TOTAL_TOKENS), ((MAX_TOTAL_TOKENS - 1) * 4 + 3, MAX_TOTAL_TOKENS)],
)
def test_text_up_to_the_token_limit_by_its_estimate_is_taken(chars, estimate) -> None:
    intent = parse_embeddings({"model": "m", "input": "a" * chars}, "rid")
    assert intent.payload[0].inputs == ["a" * chars]


def test_text_one_estimated_token_over_the_limit_is_refused_saying_so() -> None:
    e = refused({"input": "a" * (MAX_TOTAL_TOKENS * 4)})
    assert e.message == (
        f"'input' holds about {MAX_TOTAL_TOKENS + 1} tokens; at most {MAX_TOTAL_TOKENS} are accepted in one request."
    )


def test_strings_are_estimated_each_rounded_down_plus_one() -> None:
    # two strings of (MAX/2 - 1) * 4 + 3 characters: (MAX/2 - 1) + 1 each, MAX in all
    half = (MAX_TOTAL_TOKENS // 2 - 1) * 4 + 3
    assert len(parse_embeddings({"model": "m", "input": ["a" * half] * 2}, "rid").payload[0].inputs) == 2
    refused({"input": ["a" * (half + 1)] * 2})


@pytest.mark.parametrize(("fmt", "as_base64"), [(None, False), ("float", False), ("base64", True)])
def test_the_encoding_format_says_whether_base64_was_asked(fmt, as_base64) -> None:
    body = {"model": "m", "input": "x"} | ({} if fmt is None else {"encoding_format": fmt})
    assert parse_embeddings(body, "rid").payload[1] is as_base64


def test_the_call_and_the_stand_in_carry_the_request() -> None:
    intent = parse_embeddings({"model": "m3", "input": ["first", "second"], "user": "u-1"}, "rid-5")
    call, _ = intent.payload
    assert (call.request_id, call.model, call.inputs, call.user) == ("rid-5", "m3", ["first", "second"], "u-1")
    [stand_in] = intent.requests
    assert (stand_in.request_id, stand_in.model, stand_in.prompt) == ("rid-5", "m3", "first")
    tokens = parse_embeddings({"model": "m3", "input": [[5, 6], [7]]}, "rid-6")
    assert tokens.requests[0].prompt == [5, 6] and tokens.payload[0].inputs == [[5, 6], [7]]
