"""Every validation rule of gateway/openai/requests.py and gateway/openai/request_fields.py, each
with its own failing case and, beside it, the nearest body the rule accepts: a rule
removed fails its case (no other rule refuses the same body), and a rule that
refuses too much fails its accepted twin.

The rules, as the code reads them, in order (chat, then legacy completions):
the model; messages (an array, objects, a role from the list, content a string or
parts, content required for user/system/developer, tool_call_id for a tool message,
tool_calls an array); tools (an array of function tools, a name of 1-64 safe
characters, parameters an object); tool_choice (only with tools, a known word or a
named function that exists, else the right shape); max_completion_tokens and
max_tokens (both validated when both sent); each number and integer field's type and
range; booleans; stop (a string or up to four strings); logit_bias (token-id keys, no
negative id, values in -100..100); stop_token_ids; logprobs and top_logprobs (the
latter needs the former); stream_options (only with stream, an object, a boolean
include_usage); response_format (its type, a named json_schema, a schema object).
Completions: a prompt of one of the four shapes; logprobs 0-5; echo a boolean and
not with stream; best_of 1 or n; no suffix."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.errors import GatewayError
from gateway.openai.requests import parse_chat, parse_completion

USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def chat_body(**kw: Any) -> dict:
    return {"model": "m", "messages": USER, **kw}


def completion_body(**kw: Any) -> dict:
    return {"model": "m", "prompt": "hi", **kw}


# (rule, endpoint, the refused body's fields, the param named, the accepted twin's fields)
CHAT_RULES: list[tuple[str, dict, str, dict]] = [
    ("model required", {"model": None}, "model", {"model": "m"}),
    ("model a non-empty string", {"model": ""}, "model", {"model": "m"}),
    ("model not a number", {"model": 7}, "model", {"model": "m"}),
    ("messages required", {"messages": None}, "messages", {"messages": USER}),
    ("messages not empty", {"messages": []}, "messages", {"messages": USER}),
    ("messages an array", {"messages": {"role": "user"}}, "messages", {"messages": USER}),
    ("a message is an object", {"messages": ["hi"]}, "messages[0]", {"messages": USER}),
    ("a known role", {"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role", {"messages": USER}),
    (
        "content a string or parts",
        {"messages": [{"role": "user", "content": 5}]},
        "messages[0].content",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
    ),
    (
        "content required for user",
        {"messages": [{"role": "user"}]},
        "messages[0].content",
        {"messages": [{"role": "assistant"}, {"role": "user", "content": "x"}]},
    ),
    (
        "content required for system",
        {"messages": [{"role": "system", "content": None}, *USER]},
        "messages[0].content",
        {"messages": [{"role": "system", "content": "be brief"}, *USER]},
    ),
    (
        "content required for developer",
        {"messages": [{"role": "developer"}, *USER]},
        "messages[0].content",
        {"messages": [{"role": "developer", "content": "be brief"}, *USER]},
    ),
    (
        "tool_call_id for a tool message",
        {"messages": [*USER, {"role": "tool", "content": "18C"}]},
        "messages[1].tool_call_id",
        {"messages": [*USER, {"role": "tool", "content": "18C", "tool_call_id": "call_1"}]},
    ),
    (
        "tool_calls an array",
        {"messages": [*USER, {"role": "assistant", "tool_calls": {"id": "c"}}]},
        "messages[1].tool_calls",
        {"messages": [*USER, {"role": "assistant", "tool_calls": []}]},
    ),
    ("tools an array", {"tools": TOOLS[0]}, "tools", {"tools": TOOLS}),
    ("a tool is a function", {"tools": [{"type": "retrieval"}]}, "tools[0]", {"tools": TOOLS}),
    (
        "a tool's name",
        {"tools": [{"type": "function", "function": {"name": "get weather"}}]},
        "tools[0].function.name",
        {"tools": [{"type": "function", "function": {"name": "get-weather_2"}}]},
    ),
    (
        "a tool's name at most 64 characters",
        {"tools": [{"type": "function", "function": {"name": "f" * 65}}]},
        "tools[0].function.name",
        {"tools": [{"type": "function", "function": {"name": "f" * 64}}]},
    ),
    (
        "a tool's parameters an object",
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]},
        "tools[0].function.parameters",
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
    ),
    ("tool_choice only with tools", {"tool_choice": "auto"}, "tool_choice", {"tool_choice": "auto", "tools": TOOLS}),
    (
        "tool_choice a known word",
        {"tools": TOOLS, "tool_choice": "any"},
        "tool_choice",
        {"tools": TOOLS, "tool_choice": "required"},
    ),
    (
        "tool_choice names a listed function",
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "other"}}},
        "tool_choice",
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
    ),
    (
        "tool_choice's shape",
        {"tools": TOOLS, "tool_choice": {"type": "tool"}},
        "tool_choice",
        {"tools": TOOLS, "tool_choice": "none"},
    ),
    ("max_tokens at least 1", {"max_tokens": 0}, "max_tokens", {"max_tokens": 1}),
    (
        "max_tokens validated beside max_completion_tokens",
        {"max_completion_tokens": 5, "max_tokens": "ten"},
        "max_tokens",
        {"max_completion_tokens": 5, "max_tokens": 10},
    ),
    (
        "max_completion_tokens an integer",
        {"max_completion_tokens": 2.5},
        "max_completion_tokens",
        {"max_completion_tokens": 2.0},
    ),
    ("temperature a number", {"temperature": True}, "temperature", {"temperature": 1}),
    ("temperature at most 2", {"temperature": 2.01}, "temperature", {"temperature": 2}),
    ("top_p at most 1", {"top_p": 1.01}, "top_p", {"top_p": 1}),
    ("top_k at least -1", {"top_k": -2}, "top_k", {"top_k": -1}),
    ("min_p at least 0", {"min_p": -0.1}, "min_p", {"min_p": 0}),
    ("presence_penalty at least -2", {"presence_penalty": -2.5}, "presence_penalty", {"presence_penalty": -2}),
    ("frequency_penalty at most 2", {"frequency_penalty": 2.5}, "frequency_penalty", {"frequency_penalty": 2}),
    ("repetition_penalty above 0", {"repetition_penalty": 0}, "repetition_penalty", {"repetition_penalty": 0.5}),
    ("seed an int64", {"seed": -(2**63) - 1}, "seed", {"seed": -(2**63)}),
    ("n at most 128", {"n": 129}, "n", {"n": 128}),
    ("n not a boolean", {"n": True}, "n", {"n": 1}),
    ("min_tokens at least 0", {"min_tokens": -1}, "min_tokens", {"min_tokens": 0}),
    ("ignore_eos a boolean", {"ignore_eos": "yes"}, "ignore_eos", {"ignore_eos": True}),
    ("stop a string or strings", {"stop": 5}, "stop", {"stop": "5"}),
    ("stop at most four", {"stop": list("abcde")}, "stop", {"stop": list("abcd")}),
    ("logit_bias an object", {"logit_bias": [1]}, "logit_bias", {"logit_bias": {"1": 1}}),
    ("logit_bias keys are token ids", {"logit_bias": {"a": 1}}, "logit_bias", {"logit_bias": {"10": 1}}),
    ("logit_bias ids not negative", {"logit_bias": {"-1": 1}}, "logit_bias", {"logit_bias": {"0": 1}}),
    ("logit_bias values in -100..100", {"logit_bias": {"1": -101}}, "logit_bias", {"logit_bias": {"1": -100}}),
    ("logit_bias values not booleans", {"logit_bias": {"1": True}}, "logit_bias", {"logit_bias": {"1": 1}}),
    ("stop_token_ids non-negative ids", {"stop_token_ids": [2, -1]}, "stop_token_ids", {"stop_token_ids": [2, 0]}),
    ("stop_token_ids an array", {"stop_token_ids": 2}, "stop_token_ids", {"stop_token_ids": [2]}),
    ("logprobs a boolean", {"logprobs": 1}, "logprobs", {"logprobs": True}),
    ("top_logprobs needs logprobs", {"top_logprobs": 1}, "top_logprobs", {"top_logprobs": 1, "logprobs": True}),
    (
        "top_logprobs at most 20",
        {"top_logprobs": 21, "logprobs": True},
        "top_logprobs",
        {"top_logprobs": 20, "logprobs": True},
    ),
    ("stream a boolean", {"stream": "true"}, "stream", {"stream": True}),
    (
        "stream_options only with stream",
        {"stream_options": {}},
        "stream_options",
        {"stream_options": {}, "stream": True},
    ),
    (
        "stream_options an object",
        {"stream": True, "stream_options": []},
        "stream_options",
        {"stream": True, "stream_options": {}},
    ),
    (
        "include_usage a boolean",
        {"stream": True, "stream_options": {"include_usage": "yes"}},
        "stream_options.include_usage",
        {"stream": True, "stream_options": {"include_usage": True}},
    ),
    (
        "parallel_tool_calls a boolean",
        {"parallel_tool_calls": "no"},
        "parallel_tool_calls",
        {"parallel_tool_calls": False},
    ),
    (
        "response_format's type",
        {"response_format": {"type": "xml"}},
        "response_format",
        {"response_format": {"type": "json_object"}},
    ),
    (
        "response_format an object",
        {"response_format": "json_object"},
        "response_format",
        {"response_format": {"type": "text"}},
    ),
    (
        "json_schema has a name",
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
        "response_format.json_schema",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
    ),
    (
        "json_schema's schema an object",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": "{}"}}},
        "response_format.json_schema.schema",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
    ),
]

COMPLETION_RULES: list[tuple[str, dict, str, dict]] = [
    ("prompt required", {"prompt": None}, "prompt", {"prompt": "hi"}),
    ("prompt not an empty array", {"prompt": []}, "prompt", {"prompt": [""]}),
    ("prompt of one shape", {"prompt": ["a", 1]}, "prompt", {"prompt": ["a", "1"]}),
    ("token ids not booleans", {"prompt": [1, True]}, "prompt", {"prompt": [1, 1]}),
    ("no empty token-id array", {"prompt": [[1], []]}, "prompt", {"prompt": [[1], [2]]}),
    ("max_tokens at least 1", {"max_tokens": 0}, "max_tokens", {"max_tokens": 1}),
    ("logprobs at most 5", {"logprobs": 6}, "logprobs", {"logprobs": 5}),
    ("echo a boolean", {"echo": "yes"}, "echo", {"echo": True}),
    ("echo not with stream", {"echo": True, "stream": True}, "echo", {"echo": True, "stream": False}),
    ("best_of 1 or n", {"best_of": 3, "n": 2}, "best_of", {"best_of": 2, "n": 2}),
    ("best_of 1 beside n", {"best_of": 2}, "best_of", {"best_of": 1, "n": 3}),
    ("best_of at most 128", {"best_of": 129, "n": 128}, "best_of", {"best_of": 128, "n": 128}),
    ("no suffix", {"suffix": "end"}, "suffix", {"suffix": ""}),
    ("n at least 1", {"n": 0}, "n", {"n": 1}),
    ("stop at most four", {"stop": list("abcde")}, "stop", {"stop": list("abcd")}),
    (
        "response_format's type",
        {"response_format": {"type": "yaml"}},
        "response_format",
        {"response_format": {"type": "json_object"}},
    ),
]


def parsed(endpoint: str, fields: dict) -> Any:
    if endpoint == "chat":
        return parse_chat({k: v for k, v in chat_body(**fields).items() if v is not None}, "rid")
    return parse_completion({k: v for k, v in completion_body(**fields).items() if v is not None}, "rid")


CASES = [pytest.param("chat", *rule[1:], id=f"chat: {rule[0]}") for rule in CHAT_RULES] + [
    pytest.param("completions", *rule[1:], id=f"completions: {rule[0]}") for rule in COMPLETION_RULES
]


@pytest.mark.parametrize("endpoint,refused,param,accepted", CASES)
def test_the_rule_refuses_its_case_and_accepts_the_twin(endpoint, refused, param, accepted):
    with pytest.raises(GatewayError) as info:
        parsed(endpoint, refused)
    err = info.value
    assert err.status == 400 and err.param == param, (err.status, err.param, err.message)
    assert err.type == "invalid_request_error"
    parsed(endpoint, accepted)  # the nearest body the rule lets through


def test_the_unsupported_completion_features_say_so():
    """best_of, suffix and echo with stream are valid OpenAI the gateway does not do:
    their code says unsupported, not malformed."""
    for fields in ({"best_of": 3, "n": 2}, {"suffix": "end"}, {"echo": True, "stream": True}):
        with pytest.raises(GatewayError) as info:
            parsed("completions", fields)
        assert info.value.code == "unsupported_parameter", fields


def test_an_assistant_or_tool_message_may_leave_content_out():
    """Only user, system and developer messages must carry content."""
    calls = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    r = parsed(
        "chat",
        {"messages": [*USER, {"role": "assistant", "tool_calls": calls}, {"role": "tool", "tool_call_id": "call_1"}]},
    )
    assert len(r.messages) == 3
