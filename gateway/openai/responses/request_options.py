"""The structured fields of a Responses request: tools, tool_choice, text.format,
metadata and include. Each reader validates one field and returns it in the
shape the response object echoes; `gateway.openai.responses.conversation` turns
them into the chat shapes a `GenerationRequest` carries.
"""

from __future__ import annotations

import re
from typing import Any

from adapters.errors import invalid_request
from gateway.openai.requests import TOOL_NAME
from gateway.openai.responses.errors import clip, short, unsupported

MAX_TOOLS = 128
FUNCTION_TOOL_KEYS = frozenset({"type", "name", "description", "parameters", "strict"})
SCHEMA_FORMAT_KEYS = frozenset({"type", "name", "schema", "strict", "description"})
FORMAT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512
LOGPROBS_INCLUDE = "message.output_text.logprobs"


def parse_tools(value: Any) -> list[dict[str, Any]]:
    """Function tools in the Responses' flat shape `{"type": "function", "name", ...}`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_request("'tools' must be an array of tool definitions.", param="tools")
    if len(value) > MAX_TOOLS:
        raise invalid_request(f"'tools' may hold at most {MAX_TOOLS} tools; got {len(value)}.", param="tools")
    tools, names = [], set()
    for i, raw in enumerate(value):
        tool = _function_tool(raw, f"tools[{i}]")
        if tool["name"] in names:
            raise invalid_request(f"'tools[{i}].name' {tool['name']!r} is defined twice.", param=f"tools[{i}].name")
        names.add(tool["name"])
        tools.append(tool)
    return tools


def _function_tool(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise invalid_request(f"'{where}' must be an object.", param=where)
    kind = raw.get("type")
    if kind != "function":
        if isinstance(kind, str):
            raise unsupported(
                f"'{where}.type' {short(kind)} is not supported by this gateway: only 'function' tools "
                "(built-in tools such as web_search, file_search or computer_use are not available).",
                f"{where}.type",
            )
        raise invalid_request(f"'{where}.type' is required and must be 'function'.", param=f"{where}.type")
    for key in raw:
        if key not in FUNCTION_TOOL_KEYS:
            raise unsupported(f"'{where}.{clip(key)}' is not supported by this gateway.", f"{where}.{clip(key)}")
    name = raw.get("name")
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise invalid_request(
            f"'{where}.name' must be 1-64 letters, digits, '_' or '-'; got {short(name)}.", param=f"{where}.name"
        )
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid_request(f"'{where}.description' must be a string.", param=f"{where}.description")
    parameters = raw.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise invalid_request(f"'{where}.parameters' must be a JSON Schema object.", param=f"{where}.parameters")
    strict = raw.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid_request(f"'{where}.strict' must be a boolean.", param=f"{where}.strict")
    return {"type": "function", "name": name, "description": description, "parameters": parameters, "strict": strict}


def parse_tool_choice(value: Any, tools: list[dict[str, Any]]) -> str | dict[str, Any]:
    """`auto` (the default), `none`, `required`, or `{"type": "function", "name": N}`."""
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise invalid_request(
                f"'tool_choice' must be 'auto', 'none', 'required' or a named function; got {short(value)}.",
                param="tool_choice",
            )
        if value == "required" and not tools:
            raise invalid_request("'tool_choice' 'required' needs at least one tool in 'tools'.", param="tool_choice")
        return value
    if not isinstance(value, dict):
        raise invalid_request("'tool_choice' must be a string or an object.", param="tool_choice")
    kind = value.get("type")
    if kind != "function":
        raise unsupported(
            f"'tool_choice.type' {short(kind)} is not supported by this gateway; name a function with "
            '{"type": "function", "name": ...}.',
            "tool_choice.type",
        )
    name = value.get("name")
    names = [t["name"] for t in tools]
    if not isinstance(name, str) or name not in names:
        raise invalid_request(
            f"'tool_choice.name' {short(name)} is not a function in 'tools' ({', '.join(names) or 'none'}).",
            param="tool_choice.name",
        )
    return {"type": "function", "name": name}


def parse_text(value: Any) -> dict[str, Any]:
    """`text`: its `format` (text, json_object or json_schema) and `verbosity`."""
    if value is None:
        return {"format": {"type": "text"}}
    if not isinstance(value, dict):
        raise invalid_request("'text' must be an object.", param="text")
    for key in value:
        if key not in ("format", "verbosity"):
            raise invalid_request(f"'text.{clip(key)}' is not a known parameter.", param=f"text.{clip(key)}")
    out: dict[str, Any] = {"format": _format(value.get("format"))}
    verbosity = value.get("verbosity")
    if verbosity is not None:
        if verbosity != "medium":
            raise unsupported(
                f"'text.verbosity' {short(verbosity)} is not supported by this gateway (only 'medium').",
                "text.verbosity",
            )
        out["verbosity"] = verbosity
    return out


def _format(value: Any) -> dict[str, Any]:
    if value is None:
        return {"type": "text"}
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind != "json_schema":
        raise invalid_request(
            "'text.format.type' must be 'text', 'json_object' or 'json_schema'.", param="text.format.type"
        )
    for key in value:
        if key not in SCHEMA_FORMAT_KEYS:
            raise invalid_request(
                f"'text.format.{clip(key)}' is not a known parameter.", param=f"text.format.{clip(key)}"
            )
    name = value.get("name")
    if not isinstance(name, str) or not FORMAT_NAME.match(name):
        raise invalid_request(
            "'text.format.name' is required: 1-64 letters, digits, '_' or '-'.", param="text.format.name"
        )
    schema = value.get("schema")
    if not isinstance(schema, dict):
        raise invalid_request(
            "'text.format.schema' is required and must be a JSON Schema object.", "text.format.schema"
        )
    strict = value.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid_request("'text.format.strict' must be a boolean.", param="text.format.strict")
    description = value.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid_request("'text.format.description' must be a string.", param="text.format.description")
    out = {"type": "json_schema", "name": name, "schema": schema, "strict": strict}
    if description is not None:
        out["description"] = description
    return out


def parse_metadata(value: Any) -> dict[str, str]:
    """At most 16 pairs; keys up to 64 characters, values up to 512 (OpenAI's limits)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_request("'metadata' must be an object of string keys and string values.", param="metadata")
    if len(value) > METADATA_PAIRS:
        raise invalid_request(
            f"'metadata' may hold at most {METADATA_PAIRS} pairs; got {len(value)}.", param="metadata"
        )
    for key, item in value.items():
        if len(key) > METADATA_KEY_CHARS:
            raise invalid_request(
                f"'metadata' keys may have at most {METADATA_KEY_CHARS} characters; {short(key)} has {len(key)}.",
                param="metadata",
            )
        if not isinstance(item, str) or len(item) > METADATA_VALUE_CHARS:
            raise invalid_request(
                f"'metadata.{clip(key)}' must be a string of at most {METADATA_VALUE_CHARS} characters.",
                param=f"metadata.{clip(key)}",
            )
    return dict(value)


def parse_include(value: Any) -> bool:
    """Whether logprobs were asked for; any other include is refused (nothing else applies here)."""
    if value is None:
        return False
    if not isinstance(value, list):
        raise invalid_request("'include' must be an array of strings.", param="include")
    logprobs = False
    for i, entry in enumerate(value):
        if entry == LOGPROBS_INCLUDE:
            logprobs = True
        elif isinstance(entry, str):
            raise unsupported(
                f"'include[{i}]' {short(entry)} is not supported by this gateway (only '{LOGPROBS_INCLUDE}').",
                f"include[{i}]",
            )
        else:
            raise invalid_request(f"'include[{i}]' must be a string.", param=f"include[{i}]")
    return logprobs
