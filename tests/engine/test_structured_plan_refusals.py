"""engine/structured/plan.py's refusals, each with its whole message and the field it
names (a client reads both in the 400): they all come before any grammar is compiled,
so no tokenizer is needed."""

from __future__ import annotations

import pytest

from engine.structured.errors import SchemaError
from engine.structured.plan import plan_structured

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def _refusal(**fields) -> tuple[str, str]:
    with pytest.raises(SchemaError) as info:
        plan_structured(None, **fields)
    return info.value.message, info.value.param


@pytest.mark.parametrize("tools", [None, []])
def test_a_forced_call_without_tools(tools):
    assert _refusal(tools=tools, tool_choice="required") == (
        "tool_choice requires a tool call but no tools were given",
        "tool_choice",
    )


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "function"},
        {"type": "function", "function": "get_weather"},
        {"type": "function", "function": {"name": 3}},
        {"type": "function", "function": {}},
    ],
)
def test_a_named_choice_without_a_string_name(choice):
    assert _refusal(tools=[TOOL], tool_choice=choice) == ("tool_choice.function.name must be a string", "tool_choice")


def test_a_named_choice_not_among_the_tools():
    choice = {"type": "function", "function": {"name": "other"}}
    assert _refusal(tools=[TOOL], tool_choice=choice) == (
        "tool_choice names function 'other', which is not in tools",
        "tool_choice",
    )


@pytest.mark.parametrize(
    "bad",
    [
        "not a tool",
        {"type": "function"},
        {"type": "function", "function": "get_weather"},
        {"type": "function", "function": {"parameters": {}}},
        {"type": "function", "function": {"name": ""}},
        {"type": "function", "function": {"name": 7}},
    ],
)
def test_a_tool_without_a_name_is_named_by_its_index(bad):
    assert _refusal(tools=[TOOL, bad], tool_choice="required") == (
        "tools[1].function.name must be a non-empty string",
        "tools[1].function.name",
    )


def test_a_tool_whose_parameters_are_not_a_schema_names_its_field():
    bad = {"type": "function", "function": {"name": "now", "parameters": ["a"]}}
    assert _refusal(tools=[TOOL, bad], tool_choice="required") == (
        "tools[1].function.parameters must be a JSON schema object, got list",
        "tools[1].function.parameters",
    )


def test_response_format_refusals():
    assert _refusal(response_format="json") == ("response_format must be an object", "response_format")
    assert _refusal(response_format={"type": "json_schema"}) == (
        "response_format.json_schema must be an object with a 'schema'",
        "response_format",
    )
    assert _refusal(response_format={"type": "json_schema", "json_schema": {"schema": 3}}) == (
        "response_format.json_schema.schema must be a JSON schema object, got int",
        "response_format.json_schema.schema",
    )
    assert _refusal(response_format={"type": "yaml"}) == (
        "response_format type 'yaml' is not supported (use text, json_object or json_schema)",
        "response_format",
    )


@pytest.mark.parametrize("fields", [{}, {"response_format": None}, {"response_format": {}}, {"tool_choice": "auto"}])
def test_free_text_needs_no_tokenizer(fields):
    assert plan_structured(None, **fields) is None
