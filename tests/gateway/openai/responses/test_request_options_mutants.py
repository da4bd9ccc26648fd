"""gateway/openai/responses/request_options.py's refusals as a client reads them: each
one's whole message, param and code (test_request.py checks the status and param),
and the shapes each reader returns for what it accepts."""

from __future__ import annotations

import pytest

from adapters.errors import GatewayError
from gateway.openai.responses.request_options import (
    parse_include,
    parse_metadata,
    parse_text,
    parse_tool_choice,
    parse_tools,
)

F = {"type": "function", "name": "f"}
SCHEMA = {"type": "json_schema", "name": "n", "schema": {}}
UNSUPPORTED = "unsupported_parameter"

# (reader, its arguments, the message, the param, the code)
REFUSALS = [
    (parse_tools, ({"x": 1},), "'tools' must be an array of tool definitions.", "tools", None),
    (parse_tools, ([F] * 129,), "'tools' may hold at most 128 tools; got 129.", "tools", None),
    (parse_tools, ([F, F],), "'tools[1].name' 'f' is defined twice.", "tools[1].name", None),
    (parse_tools, (["x"],), "'tools[0]' must be an object.", "tools[0]", None),
    (
        parse_tools,
        ([{"type": "web_search"}],),
        "'tools[0].type' 'web_search' is not supported by this gateway: only 'function' tools "
        "(built-in tools such as web_search, file_search or computer_use are not available).",
        "tools[0].type",
        UNSUPPORTED,
    ),
    (parse_tools, ([{"name": "f"}],), "'tools[0].type' is required and must be 'function'.", "tools[0].type", None),
    (parse_tools, ([{**F, "x": 1}],), "'tools[0].x' is not supported by this gateway.", "tools[0].x", UNSUPPORTED),
    (
        parse_tools,
        ([{**F, "name": "a b"}],),
        "'tools[0].name' must be 1-64 letters, digits, '_' or '-'; got 'a b'.",
        "tools[0].name",
        None,
    ),
    (
        parse_tools,
        ([{**F, "description": 1}],),
        "'tools[0].description' must be a string.",
        "tools[0].description",
        None,
    ),
    (
        parse_tools,
        ([{**F, "parameters": []}],),
        "'tools[0].parameters' must be a JSON Schema object.",
        "tools[0].parameters",
        None,
    ),
    (parse_tools, ([{**F, "strict": "yes"}],), "'tools[0].strict' must be a boolean.", "tools[0].strict", None),
    (
        parse_tool_choice,
        ("sometimes", []),
        "'tool_choice' must be 'auto', 'none', 'required' or a named function; got 'sometimes'.",
        "tool_choice",
        None,
    ),
    (
        parse_tool_choice,
        ("required", []),
        "'tool_choice' 'required' needs at least one tool in 'tools'.",
        "tool_choice",
        None,
    ),
    (parse_tool_choice, (3, []), "'tool_choice' must be a string or an object.", "tool_choice", None),
    (
        parse_tool_choice,
        ({"type": "file_search"}, []),
        "'tool_choice.type' 'file_search' is not supported by this gateway; name a function with "
        '{"type": "function", "name": ...}.',
        "tool_choice.type",
        UNSUPPORTED,
    ),
    (
        parse_tool_choice,
        ({"type": "function", "name": "g"}, [{"name": "f"}, {"name": "h"}]),
        "'tool_choice.name' 'g' is not a function in 'tools' (f, h).",
        "tool_choice.name",
        None,
    ),
    (
        parse_tool_choice,
        ({"type": "function", "name": "g"}, []),
        "'tool_choice.name' 'g' is not a function in 'tools' (none).",
        "tool_choice.name",
        None,
    ),
    (parse_text, ([],), "'text' must be an object.", "text", None),
    (parse_text, ({"x": 1},), "'text.x' is not a known parameter.", "text.x", None),
    (
        parse_text,
        ({"verbosity": "low"},),
        "'text.verbosity' 'low' is not supported by this gateway (only 'medium').",
        "text.verbosity",
        UNSUPPORTED,
    ),
    (
        parse_text,
        ({"format": {"type": "yaml"}},),
        "'text.format.type' must be 'text', 'json_object' or 'json_schema'.",
        "text.format.type",
        None,
    ),
    (
        parse_text,
        ({"format": "text"},),
        "'text.format.type' must be 'text', 'json_object' or 'json_schema'.",
        "text.format.type",
        None,
    ),
    (parse_text, ({"format": {**SCHEMA, "x": 1}},), "'text.format.x' is not a known parameter.", "text.format.x", None),
    (
        parse_text,
        ({"format": {**SCHEMA, "name": "a b"}},),
        "'text.format.name' is required: 1-64 letters, digits, '_' or '-'.",
        "text.format.name",
        None,
    ),
    (
        parse_text,
        ({"format": {**SCHEMA, "schema": []}},),
        "'text.format.schema' is required and must be a JSON Schema object.",
        "text.format.schema",
        None,
    ),
    (
        parse_text,
        ({"format": {**SCHEMA, "strict": 1}},),
        "'text.format.strict' must be a boolean.",
        "text.format.strict",
        None,
    ),
    (
        parse_text,
        ({"format": {**SCHEMA, "description": 1}},),
        "'text.format.description' must be a string.",
        "text.format.description",
        None,
    ),
    (parse_metadata, ([],), "'metadata' must be an object of string keys and string values.", "metadata", None),
    (
        parse_metadata,
        ({f"k{i}": "v" for i in range(17)},),
        "'metadata' may hold at most 16 pairs; got 17.",
        "metadata",
        None,
    ),
    (parse_metadata, ({"k": 1},), "'metadata.k' must be a string of at most 512 characters.", "metadata.k", None),
    (parse_include, ("x",), "'include' must be an array of strings.", "include", None),
    (
        parse_include,
        (["file_search_call.results"],),
        "'include[0]' 'file_search_call.results' is not supported by this gateway "
        "(only 'message.output_text.logprobs').",
        "include[0]",
        UNSUPPORTED,
    ),
    (parse_include, ([3],), "'include[0]' must be a string.", "include[0]", None),
]


@pytest.mark.parametrize(("reader", "args", "message", "param", "code"), REFUSALS)
def test_each_refusal_says_what_is_wrong_and_where(reader, args, message, param, code):
    with pytest.raises(GatewayError) as info:
        reader(*args)
    err = info.value
    assert (err.status, err.message, err.param, err.code) == (400, message, param, code)


def test_a_metadata_key_too_long_is_named_with_its_length():
    with pytest.raises(GatewayError) as info:
        parse_metadata({"k" * 65: "v"})
    assert info.value.message.startswith("'metadata' keys may have at most 64 characters; 'kkk")
    assert info.value.message.endswith(" has 65.")


def test_what_each_reader_returns_for_what_it_accepts():
    assert parse_tools(None) == [] and parse_tools([]) == []
    assert parse_tools([{**F, "description": "d", "parameters": {"type": "object"}, "strict": True}]) == [
        {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True}
    ]
    assert parse_tools([F]) == [
        {"type": "function", "name": "f", "description": None, "parameters": None, "strict": None}
    ]
    assert parse_tool_choice(None, []) == "auto"
    assert [parse_tool_choice(c, [F]) for c in ("auto", "none", "required")] == ["auto", "none", "required"]
    assert parse_tool_choice({"type": "function", "name": "f"}, [F]) == {"type": "function", "name": "f"}
    assert parse_text(None) == {"format": {"type": "text"}}
    assert parse_text({}) == {"format": {"type": "text"}}
    assert parse_text({"format": {"type": "json_object"}, "verbosity": "medium"}) == {
        "format": {"type": "json_object"},
        "verbosity": "medium",
    }
    assert parse_text({"format": SCHEMA}) == {"format": {**SCHEMA, "strict": None}}
    assert parse_text({"format": {**SCHEMA, "strict": False, "description": "d"}}) == {
        "format": {**SCHEMA, "strict": False, "description": "d"}
    }
    assert parse_metadata(None) == {} and parse_metadata({"a": ""}) == {"a": ""}
    assert parse_include(None) is False and parse_include([]) is False
    assert parse_include(["message.output_text.logprobs"]) is True
