"""The structured-output cases every mode test runs, and the oracle that judges an answer.

Schemas are bounded (short strings, integer ranges, few items), so a grammar-following
random model always finishes well inside max_tokens: an answer cut by `length` would be
a real failure, not noise. `json_object` alone is unbounded; its requests lean on
logit_bias towards the tokens that close strings and objects (a user knob, not a
grammar one) so they finish too. tests/engine/test_structured_oracle.py shows the
oracle rejects what it must.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jsonschema

from adapters.base import Adapter, Finish, GenerationRequest, TextDelta, ToolCallDelta, Usage


def closed_object(**properties: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema object that requires every one of its `properties`."""
    return {"type": "object", "properties": properties, "required": list(properties)}


PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        "address": closed_object(
            city={"type": "string", "maxLength": 6},
            zip={"type": "integer", "minimum": 10000, "maximum": 99999},
        ),
    },
    "required": ["name", "age", "role", "address"],
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": closed_object(
                city={"type": "string", "maxLength": 10},
                unit={"enum": ["celsius", "fahrenheit"]},
            ),
        },
    },
    {
        "type": "function",
        "function": {
            "name": "place_order",
            "description": "Order an item",
            "parameters": {
                "type": "object",
                "properties": {
                    "item": closed_object(
                        sku={"type": "string", "maxLength": 6},
                        qty={"type": "integer", "minimum": 1, "maximum": 9},
                    ),
                    "express": {"type": "boolean"},
                    "notes": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
                },
                "required": ["item", "express"],
            },
        },
    },
    {"type": "function", "function": {"name": "ping", "description": "No arguments"}},
]
TOOL_PARAMETERS = {
    t["function"]["name"]: t["function"].get(
        "parameters", {"type": "object", "properties": {}, "additionalProperties": False}
    )
    for t in TOOLS
}


@dataclass(frozen=True)
class Mode:
    """One structured-output mode: the request fields it adds and what its answer must be."""

    name: str
    request: dict[str, Any]
    schema: dict | None = None  # the content's schema (json modes)
    tool_names: frozenset[str] = frozenset()
    max_calls: int | None = None  # None: any number >= 1
    bias_closers: bool = False  # lean towards closing tokens (unbounded json_object)


MODES = [
    Mode("json_object", {"response_format": {"type": "json_object"}}, schema={"type": "object"}, bias_closers=True),
    Mode(
        "json_schema",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True},
            }
        },
        schema=PERSON_SCHEMA,
    ),
    Mode(
        "tool_required",
        {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
        tool_names=frozenset(TOOL_PARAMETERS),
        max_calls=1,
    ),
    Mode(
        "tool_named",
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "place_order"}}},
        tool_names=frozenset({"place_order"}),
        max_calls=1,
    ),
    Mode(
        "parallel_calls",
        {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
        tool_names=frozenset(TOOL_PARAMETERS),
    ),
]
MODE_IDS = [m.name for m in MODES]
MESSAGES = [{"role": "user", "content": "Answer with the requested structure."}]


def logit_bias_for(mode: Mode, token_bytes, vocab_size: int) -> dict[int, float]:
    """The mode's logit_bias over a tokenizer (token id -> bytes)."""
    bias: dict[int, float] = {}
    if mode.bias_closers:
        bias.update({t: 3.0 for t in range(vocab_size) if b'"' in token_bytes(t) or b"}" in token_bytes(t)})
    return bias


@dataclass
class Answer:
    """One choice as a client rebuilt it."""

    content: str | None
    tool_calls: list[tuple[str, str]]  # (name, arguments JSON text)
    finish_reason: str
    completion_tokens: int | None = None


async def collect(adapter: Adapter, request: GenerationRequest) -> Answer:
    """The answer of a one-choice request, rebuilt from the adapter's events."""
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    finish = None
    tokens = None
    async for event in adapter.generate(request):
        if isinstance(event, TextDelta):
            content.append(event.text)
        elif isinstance(event, ToolCallDelta):
            call = calls.setdefault(event.tool_index, ["", ""])
            if event.name:
                assert not call[0], "a tool call's name was sent twice"
                call[0] = event.name
            call[1] += event.arguments or ""
        elif isinstance(event, Finish):
            assert finish is None, "two finish events for one choice"
            finish = event.reason
        elif isinstance(event, Usage):
            tokens = event.completion_tokens
    assert finish is not None
    return Answer("".join(content) or None, [tuple(calls[i]) for i in sorted(calls)], finish, tokens)


def call_finishes(tool_choice: Any) -> tuple[str, ...]:
    """The finish reasons a choice that made its calls may end with: `tool_calls`, and for
    a forced named function also OpenAI's `stop` (what the gateway's stream guard sends;
    an adapter's own events, read without the guard, may still say `tool_calls`)."""
    return ("stop", "tool_calls") if isinstance(tool_choice, dict) else ("tool_calls",)


def check_answer(mode: Mode, answer: Answer, max_tokens: int) -> None:
    """AssertionError unless `answer` is a valid answer in `mode`."""
    assert answer.finish_reason != "length", f"{mode.name}: cut by max_tokens={max_tokens}: {answer}"
    if mode.schema is not None:
        assert answer.finish_reason == "stop", answer
        assert not answer.tool_calls, answer
        value = json.loads(answer.content or "")
        jsonschema.validate(value, mode.schema)
        return
    assert answer.finish_reason in call_finishes(mode.request.get("tool_choice")), answer
    assert not answer.content, f"{mode.name}: tool calls came back as text: {answer.content!r}"
    assert answer.tool_calls, answer
    if mode.max_calls is not None:
        assert len(answer.tool_calls) <= mode.max_calls, answer
    for name, arguments in answer.tool_calls:
        assert name in mode.tool_names, f"{mode.name}: unexpected tool {name!r}"
        jsonschema.validate(json.loads(arguments), TOOL_PARAMETERS[name])
