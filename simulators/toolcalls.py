"""Deciding when a simulator answers with a tool call, and what the call says.

A real model decides by itself; the doubles decide by rule so tests can steer it:
a call is made when the request has `tools` and either `tool_choice` is
`"required"` or names a function, or the prompt carries `[[sim:tool_call]]`
(with `tool_choice` `"auto"` or absent). `tool_choice: "none"` never calls.

The arguments are built from the tool's JSON schema: every required property (or
every property when none is marked required) gets a fixed value of its type, so
the call is valid JSON that matches the schema's shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

_VALUES_BY_TYPE: dict[str, Any] = {
    "string": "sim",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "array": [],
    "object": {},
    "null": None,
}


@dataclass(frozen=True, slots=True)
class ToolCallPlan:
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        return orjson.dumps(self.arguments).decode()


def tool_names(tools: list[Any]) -> list[str]:
    names = []
    for tool in tools:
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            name = tool["function"].get("name")
            if isinstance(name, str):
                names.append(name)
    return names


def named_choice(tool_choice: Any) -> str | None:
    """The function name of `{"type":"function","function":{"name":...}}`, else None."""
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return fn["name"]
    return None


def plan_tool_call(tools: list[Any] | None, tool_choice: Any, marker: bool) -> ToolCallPlan | None:
    if not tools or tool_choice == "none":
        return None
    name = named_choice(tool_choice)
    if name is None and not (tool_choice == "required" or marker):
        return None
    chosen = None
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and (name is None or fn.get("name") == name):
            chosen = fn
            break
    if chosen is None:
        return None
    return ToolCallPlan(name=str(chosen.get("name")), arguments=arguments_for(chosen.get("parameters")))


def arguments_for(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties")
    if not isinstance(props, dict):
        return {}
    required = schema.get("required")
    keys = [k for k in required if k in props] if isinstance(required, list) and required else list(props)
    return {key: value_for(props[key]) for key in keys}


def value_for(prop: Any) -> Any:
    if not isinstance(prop, dict):
        return "sim"
    if isinstance(prop.get("enum"), list) and prop["enum"]:
        return prop["enum"][0]
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        return arguments_for(prop)
    return _VALUES_BY_TYPE.get(str(kind), "sim")


def fragments(text: str, size: int = 8) -> list[str]:
    """Split argument text into streaming deltas of about `size` characters."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
