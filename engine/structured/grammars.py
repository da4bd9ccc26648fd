"""Grammar text for each structured mode, and its compilation with clear errors.

Tool calls are generated in the chat template's hermes format, exactly as
engine/tool_parser.py reads them back:

    <tool_call>\n{"name": "<name>", "arguments": <JSON valid for that tool>}\n</tool_call>

with calls joined by "\n" when more than one is allowed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import llguidance

from engine.structured.errors import SchemaError
from engine.structured.locate import locate_failure

_MAX_ERROR_CHARS = 400


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: dict      # prepared (see schemas.prepare_schema)
    param: str            # request field of its schema, for error messages


def json_grammar(prepared_schema: dict) -> str:
    return llguidance.LLMatcher.grammar_from_json_schema(prepared_schema)


def tool_calls_grammar(tools: list[ToolSpec], *, multiple: bool) -> str:
    """Lark grammar: one call (or, when `multiple`, one or more) to one of `tools`."""
    lines = ['start: call ("\\n" call)*' if multiple else "start: call",
             'call: "<tool_call>\\n" (' + " | ".join(f"fn{i}" for i in range(len(tools))) + ') "\\n</tool_call>"']
    for i, tool in enumerate(tools):
        header = json.dumps('{"name": ' + json.dumps(tool.name) + ', "arguments": ')
        lines.append(f'fn{i}: {header} fn{i}_args "}}"')
        lines.append(f"fn{i}_args: %json {json.dumps(tool.parameters)}")
    return llguidance.LLMatcher.grammar_from_lark("\n".join(lines) + "\n")


def check_json_schema(prepared_schema: dict, tokenizer: llguidance.LLTokenizer, *, what: str, param: str) -> str:
    """The schema's grammar, or SchemaError saying what is wrong and where (bad or unsupported)."""
    def error_of(schema: dict) -> str:
        return llguidance.LLMatcher.validate_grammar(json_grammar(schema), tokenizer)

    grammar = json_grammar(prepared_schema)
    error = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
    if error:
        where = locate_failure(prepared_schema, error_of)
        raise SchemaError(f"{what} is not supported{' at ' + where if where else ''}: {_short(error)}", param)
    return grammar


def compile_grammar(grammar: str, tokenizer: llguidance.LLTokenizer, *, what: str,
                    param: str) -> llguidance.LLMatcher:
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    if matcher.is_error():
        raise SchemaError(f"{what} is not supported: {_short(matcher.get_error())}", param)
    return matcher


def _short(message: str) -> str:
    message = " ".join(line.strip() for line in message.splitlines() if line.strip()) or "unknown error"
    return message if len(message) <= _MAX_ERROR_CHARS else message[:_MAX_ERROR_CHARS] + "..."
