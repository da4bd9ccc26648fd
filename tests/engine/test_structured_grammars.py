"""engine/structured/grammars.py's texts without a model: the tool-call grammar for one
call or several, and the grammar engine's complaints made one short line."""

from __future__ import annotations

from engine.structured.grammars import _MAX_ERROR_CHARS, ToolSpec, _short, tool_calls_grammar

SPECS = [ToolSpec("now", {"type": "object"}, "tools[0].function.parameters"), ToolSpec("b", {}, "p")]


def test_one_call_or_several():
    several = tool_calls_grammar(SPECS, multiple=True).splitlines()
    one = tool_calls_grammar(SPECS, multiple=False).splitlines()
    assert several[0] == 'start: call ("\\n" call)*'
    assert one[0] == "start: call"
    assert several[1:] == one[1:]
    assert one[1] == "call: fn0 | fn1"
    assert one[2] == 'fn0: "<tool_call>\\n{\\"name\\": \\"now\\", \\"arguments\\": " fn0_args "}\\n</tool_call>"'
    assert one[3] == 'fn0_args: %json {"type": "object"}'


def test_a_complaint_is_one_line_of_its_non_blank_lines():
    assert _short("  first\n\n   second  \n") == "first second"
    assert _short("") == "unknown error"
    assert _short(" \n \n") == "unknown error"


def test_a_long_complaint_is_cut_above_its_limit_only():
    assert _MAX_ERROR_CHARS == 400
    at = "x" * _MAX_ERROR_CHARS
    assert _short(at) == at
    assert _short(at + "y") == at + "..."
