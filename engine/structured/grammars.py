"""Grammar text for each structured mode, and its compilation with clear errors.

Tool calls are generated in the chat template's hermes format, built from the
literals of engine/text/hermes_format.py, which ForcedToolCallReader
(engine/text/forced_tool_calls.py) reads back by the same structure:

    <tool_call>\n{"name": "<name>", "arguments": <JSON valid for that tool>}\n</tool_call>

with calls joined by "\n" when more than one is allowed.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

import llguidance

from engine.structured.errors import SchemaError
from engine.structured.locate import locate_failure
from engine.text.hermes_format import ARGUMENTS_HEAD, CALL_HEAD, CALL_SEPARATOR, CALL_TAIL

_MAX_ERROR_CHARS = 400


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: dict  # prepared (see schemas.prepare_schema)
    param: str  # request field of its schema, for error messages


def json_grammar(prepared_schema: dict) -> str:
    return llguidance.LLMatcher.grammar_from_json_schema(prepared_schema)


def tool_calls_grammar(tools: list[ToolSpec], *, multiple: bool) -> str:
    """Lark grammar: one call (or, when `multiple`, one or more) to one of `tools`."""
    # json.dumps writes a Lark string literal (same quoting and escapes).
    lines = [
        f"start: call ({json.dumps(CALL_SEPARATOR)} call)*" if multiple else "start: call",
        "call: " + " | ".join(f"fn{i}" for i in range(len(tools))),
    ]
    for i, tool in enumerate(tools):
        head = json.dumps(CALL_HEAD + json.dumps(tool.name) + ARGUMENTS_HEAD)
        lines.append(f"fn{i}: {head} fn{i}_args {json.dumps(CALL_TAIL)}")
        lines.append(f"fn{i}_args: %json {json.dumps(tool.parameters)}")
    return llguidance.LLMatcher.grammar_from_lark("\n".join(lines) + "\n")


def check_json_schema(prepared_schema: dict, tokenizer: llguidance.LLTokenizer, *, what: str, param: str) -> str:
    """The schema's grammar, or SchemaError saying what is wrong and where (bad or unsupported)."""

    def error_of(schema: dict) -> str:
        return llguidance.LLMatcher.validate_grammar(json_grammar(schema), tokenizer)

    grammar = json_grammar(prepared_schema)
    key = (id(tokenizer), grammar)
    with _compiled_lock:
        if key in _checked or key in _compiled:
            return grammar
    error = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
    if error:
        where = locate_failure(prepared_schema, error_of)
        raise SchemaError(f"{what} is not supported{' at ' + where if where else ''}: {_short(error)}", param)
    with _compiled_lock:
        _checked[key] = None
        while len(_checked) > _COMPILED_MAX:
            _checked.popitem(last=False)
    return grammar


# Compiled start states by grammar text. Requests with the same schema or tools share
# one: compiling is skipped, and so is the lexer warm-up, whose states llguidance keeps
# with the compiled grammar (copies of a warm start state compute masks several times
# faster; see docs/structured-output.md).
_COMPILED_MAX = 256
_compiled: OrderedDict[tuple[int, str], llguidance.LLMatcher] = OrderedDict()
_checked: OrderedDict[tuple[int, str], None] = OrderedDict()  # JSON grammars known to be valid
_compiled_lock = threading.Lock()


def cached_grammar(grammar: str, tokenizer: llguidance.LLTokenizer) -> llguidance.LLMatcher | None:
    """The compiled start state of `grammar`, if it was compiled before (never consume from it: copy)."""
    key = (id(tokenizer), grammar)
    with _compiled_lock:
        matcher = _compiled.get(key)
        if matcher is not None:
            _compiled.move_to_end(key)
        return matcher


def compile_grammar(grammar: str, tokenizer: llguidance.LLTokenizer, *, what: str, param: str) -> llguidance.LLMatcher:
    """The compiled start state of `grammar` (shared: never consume from it, copy it)."""
    matcher = cached_grammar(grammar, tokenizer)
    if matcher is not None:
        return matcher
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    if matcher.is_error():
        raise SchemaError(f"{what} is not supported: {_short(matcher.get_error())}", param)
    with _compiled_lock:
        _compiled[(id(tokenizer), grammar)] = matcher
        while len(_compiled) > _COMPILED_MAX:
            _compiled.popitem(last=False)
    return matcher


def _short(message: str) -> str:
    message = " ".join(line.strip() for line in message.splitlines() if line.strip()) or "unknown error"
    return message if len(message) <= _MAX_ERROR_CHARS else message[:_MAX_ERROR_CHARS] + "..."
