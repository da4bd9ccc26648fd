"""Issue 13's tool-call promise, as cases and an oracle shared by the adapter and e2e tests.

Forced calls (`tool_choice` "required" or named): every call's arguments parse and
validate against its tool's parameters unless `finish_reason` is `length`, and
nothing of the calls' markup reaches `content` (forced answers have no content).
Free text (`tool_choice` "auto"): no tag text in `content`, and every call that
comes back parses as a JSON object and names one of the tools, whatever the finish.

The schemas are deliberately not all bounded (the issue's `city` is any string), so
some answers run into `max_tokens`: the `length` path is part of what is checked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jsonschema

from engine.text.hermes_format import END_TAG, START_TAG
from tests.engine.structured_cases import Answer, call_finishes

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
THERMOSTAT = {
    "type": "function",
    "function": {
        "name": "set_thermostat",
        "parameters": {
            "type": "object",
            "properties": {
                "temperature": {"type": "number", "minimum": -10, "maximum": 40},
                "room": {"type": "integer", "minimum": 1, "maximum": 20},
            },
            "required": ["temperature", "room"],
        },
    },
}
EVENT = {
    "type": "function",
    "function": {
        "name": "create_event",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "maxLength": 12},
                "attendees": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
                "when": {
                    "type": "object",
                    "properties": {
                        "day": {"type": "integer", "minimum": 1, "maximum": 31},
                        "month": {"enum": ["jan", "feb", "mar"]},
                    },
                    "required": ["day"],
                },
            },
            "required": ["title"],
        },
    },
}
TOOLS = [WEATHER, THERMOSTAT, EVENT]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES = [{"role": "user", "content": "What's the weather in Paris?"}, {"role": "user", "content": "Thanks!"}]
MAX_TOKENS = 80


@dataclass(frozen=True)
class ToolMode:
    name: str
    fields: dict[str, Any]  # tools / tool_choice / parallel_tool_calls of the request
    forced: bool


FORCED_MODES = [
    ToolMode("required", {"tools": TOOLS, "tool_choice": "required"}, True),
    ToolMode("required_single", {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False}, True),
    ToolMode(
        "named_event", {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "create_event"}}}, True
    ),
    ToolMode(
        "named_thermostat",
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "set_thermostat"}}},
        True,
    ),
]
AUTO_MODE = ToolMode("auto", {"tools": TOOLS, "tool_choice": "auto"}, False)

# The reproduction: with the tag-scanning parser the first call came back as
# `{"city": "tooltemperature!<|ortyouameouv>` and `content` as `owC"}}\n</tool_call>`.
REPRODUCTION = {"messages": MESSAGES, "tools": [WEATHER], "tool_choice": "required", "seed": 1, "max_tokens": 80}


def check_tool_answer(mode: ToolMode, answer: Answer, max_tokens: int) -> None:
    """AssertionError unless `answer` keeps the tool-call promise in `mode`."""
    content = answer.content or ""
    for tag in (START_TAG, END_TAG):
        assert tag not in content, f"{mode.name}: tool-call markup in content: {answer}"
    assert answer.finish_reason in ("stop", "length", "tool_calls"), answer
    if answer.finish_reason == "length":
        assert answer.completion_tokens in (None, max_tokens), answer
    names = {n for n in PARAMETERS if n in json.dumps(mode.fields["tool_choice"])} or set(PARAMETERS)
    if mode.forced:
        assert not content, f"{mode.name}: a forced answer has no content: {answer}"
        if mode.fields.get("parallel_tool_calls") is False or isinstance(mode.fields["tool_choice"], dict):
            assert len(answer.tool_calls) <= 1, answer
        if answer.finish_reason != "length":
            assert answer.finish_reason in call_finishes(mode.fields["tool_choice"]) and answer.tool_calls, answer
        else:  # only a first call can be cut: a further one max_tokens cut is never sent
            assert len(answer.tool_calls) <= 1, answer
    elif answer.tool_calls:
        assert answer.finish_reason in ("tool_calls", "length"), answer
    for name, arguments in answer.tool_calls:
        assert name in names, f"{mode.name}: unexpected tool {name!r}: {answer}"
        if mode.forced and answer.finish_reason == "length":
            continue  # the last call may be cut; the promise is that `length` says so
        value = json.loads(arguments)
        assert isinstance(value, dict), answer
        if mode.forced:
            jsonschema.validate(value, PARAMETERS[name])
