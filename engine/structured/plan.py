"""From a request's response_format / tools / tool_choice to the grammar to decode with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import llguidance

from engine.structured.errors import SchemaError
from engine.structured.grammars import ToolSpec, check_json_schema, compile_grammar, tool_calls_grammar
from engine.structured.schemas import NO_PARAMETERS, prepare_schema

# Keywords that decide a schema's type themselves; without any of them, and without
# "type", a tool's parameters schema is taken to describe an object.
_COMPOSED = {"type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const", "not"}


@dataclass
class StructuredPlan:
    kind: Literal["json", "tool_calls"]
    grammar: str
    matcher: llguidance.LLMatcher  # compiled start state, shared by requests: GrammarMask copies it


def plan_structured(
    tokenizer: llguidance.LLTokenizer,
    *,
    response_format: dict | None = None,
    tools: list[dict] | None = None,
    tool_choice: Any = None,
    parallel_tool_calls: bool | None = True,
) -> StructuredPlan | None:
    """The grammar a request must be decoded under, or None for free text.

    Forced tool calls (`tool_choice` "required" or a named function) take precedence
    over `response_format`: the answer is then tool calls, not content. Raises
    SchemaError (a 400) for anything that cannot be honoured, before generation.
    """
    if tool_choice == "required" or isinstance(tool_choice, dict):
        specs = _tool_specs(tools, tool_choice)
        for spec in specs:  # per tool first, so the error names the tool at fault
            check_json_schema(
                spec.parameters, tokenizer, what=f"the parameters schema of tool {spec.name!r}", param=spec.param
            )
        named = isinstance(tool_choice, dict)
        grammar = tool_calls_grammar(specs, multiple=not named and parallel_tool_calls is not False)
        return StructuredPlan(
            "tool_calls", grammar, compile_grammar(grammar, tokenizer, what="the tool-call grammar", param="tools")
        )
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise SchemaError("response_format must be an object", "response_format")
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        # Any object: keys are free here, as json_object promises nothing more.
        schema = prepare_schema({"type": "object", "additionalProperties": True}, param="response_format")
        what = "response_format json_object"
    elif kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict):
            raise SchemaError("response_format.json_schema must be an object with a 'schema'", "response_format")
        raw = spec.get("schema", {})
        # `strict` needs nothing extra: the output always follows the schema.
        schema = prepare_schema(raw, param="response_format.json_schema.schema")
        what = f"the JSON schema {spec.get('name')!r}" if spec.get("name") else "the JSON schema"
    else:
        raise SchemaError(
            f"response_format type {kind!r} is not supported (use text, json_object or json_schema)", "response_format"
        )
    grammar = check_json_schema(schema, tokenizer, what=what, param="response_format")
    return StructuredPlan("json", grammar, compile_grammar(grammar, tokenizer, what=what, param="response_format"))


def _tool_specs(tools: list[dict] | None, tool_choice: Any) -> list[ToolSpec]:
    if not tools:
        raise SchemaError("tool_choice requires a tool call but no tools were given", "tool_choice")
    wanted = None
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        wanted = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(wanted, str):
            raise SchemaError("tool_choice.function.name must be a string", "tool_choice")
    specs: list[ToolSpec] = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise SchemaError(f"tools[{i}].function.name must be a non-empty string", f"tools[{i}].function.name")
        if wanted is not None and name != wanted:
            continue
        param = f"tools[{i}].function.parameters"
        raw = fn.get("parameters")
        if isinstance(raw, dict) and not _COMPOSED.intersection(raw):
            raw = {"type": "object", **raw}  # arguments are an object, whatever else the schema allows
        parameters = prepare_schema(NO_PARAMETERS if raw is None else raw, param=param)
        specs.append(ToolSpec(name, parameters, param))
    if not specs:
        raise SchemaError(f"tool_choice names function {wanted!r}, which is not in tools", "tool_choice")
    return specs
