"""What a refused request is told (gateway/openai/requests.py): the tenant reads the
message of a 400 to fix the request, so each one names the field as the client
spelled it, says what was wrong in a full sentence (ending with a period), and
quotes back the value it refused where there is one. The status and `param` of
every rule are pinned in test_request_rules.py; this pins the words."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.errors import GatewayError
from gateway.openai.requests import parse_chat, parse_completion, parse_json_body

USER = [{"role": "user", "content": "hi"}]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather"}},
    {"type": "function", "function": {"name": "get_time"}},
]


def refused(fn: Any) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        fn()
    err = info.value
    assert err.status == 400 and err.message.endswith("."), err.message
    return err


def chat(**fields: Any) -> Any:
    return lambda: parse_chat({"model": "m", "messages": USER, **fields}, "rid")


def completion(**fields: Any) -> Any:
    return lambda: parse_completion({"model": "m", "prompt": "hi", **fields}, "rid")


# (the refused request, words the message must carry: the field as spelled, and what it needs)
CASES = [
    (chat(messages=[]), ["'messages' is required", "non-empty array"]),
    (chat(messages=[{"role": "bot", "content": "x"}]), ["'messages[0].role'", "got 'bot'"]),
    (chat(tools={"type": "function"}), ["'tools' must be an array"]),
    (chat(tools=[{"type": "function", "function": {"name": "get weather"}}]), ["got 'get weather'"]),
    (chat(tool_choice="auto"), ["'tool_choice' is only allowed when 'tools'"]),
    (chat(tools=TOOLS, tool_choice="any"), ["'tool_choice' must be", "got 'any'"]),
    (
        chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "other"}}),
        # the refused name, then every name the request offers, sorted, comma-separated
        ["names function 'other'", "(get_time, get_weather)"],
    ),
    (chat(tools=TOOLS, tool_choice={"type": "tool"}), ["'tool_choice' must be 'none', 'auto', 'required' or {"]),
    (chat(response_format={"type": "xml"}), ["'response_format.type' must be 'text'"]),
    (
        chat(response_format={"type": "json_schema", "json_schema": {}}),
        ["'response_format.json_schema' must be an object with a 'name'"],
    ),
    (
        chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": []}}),
        ["'response_format.json_schema.schema' must be a JSON Schema object"],
    ),
    (chat(top_logprobs=2), ["'top_logprobs' requires 'logprobs'"]),
    (completion(best_of=3, n=2), ["'best_of' other than 1 or n is not supported"]),
    (completion(suffix="end"), ["'suffix' (insertion) is not supported"]),
    (completion(echo=True, stream=True), ["'echo' is not supported together with 'stream'"]),
]


@pytest.mark.parametrize("request_, words", CASES, ids=[" / ".join(c[1]) for c in CASES])
def test_a_refusal_says_what_is_wrong_in_the_clients_terms(request_, words):
    message = refused(request_).message
    for w in words:
        assert w in message, (w, message)


def test_a_missing_prompt_is_told_the_four_shapes_a_prompt_may_take():
    assert refused(completion(prompt=None)).message == (
        "'prompt' is required: a string, an array of strings, an array of token ids, "
        "or an array of token-id arrays, and not empty."
    )


def test_an_empty_or_non_object_body_is_told_what_to_send():
    assert refused(lambda: parse_json_body(b"")).message == "The request body is empty; send a JSON object."
    assert "must be a JSON object, not list." in refused(lambda: parse_json_body(b"[1]")).message
    assert "not str." in refused(lambda: parse_json_body(b'"x"')).message


def test_a_value_out_of_range_is_not_called_unsupported():
    # best_of past its range is a malformed value, not a feature the gateway lacks
    err = refused(completion(best_of=129, n=128))
    assert err.param == "best_of" and err.code != "unsupported_parameter"
    assert err.code == "integer_above_max_value" and "<= 128" in err.message
