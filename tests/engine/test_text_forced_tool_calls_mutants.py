"""engine/text/forced_tool_calls.py details: its counters and `complete` at each step
of a call, what finish returns, and each way text can leave the grammar's shape,
named in the error."""

from __future__ import annotations

import pytest

from engine.text.forced_tool_calls import ForcedToolCallReader, ToolCallFormatError
from engine.text.hermes_format import ARGUMENTS_HEAD, CALL_HEAD, CALL_SEPARATOR, CALL_TAIL, ToolCallPiece


def call(name: str, arguments: str) -> str:
    return f'{CALL_HEAD}"{name}"{ARGUMENTS_HEAD}{arguments}{CALL_TAIL}'


def test_the_counters_and_complete_follow_each_call():
    reader = ForcedToolCallReader()
    assert (reader.num_calls, reader.num_closed_calls, reader.complete) == (0, 0, False)
    assert reader.feed(CALL_HEAD + '"f"') == [ToolCallPiece(0, name="f")]
    assert (reader.num_calls, reader.num_closed_calls, reader.complete) == (1, 0, False)
    assert reader.feed(ARGUMENTS_HEAD + '{"a": 1}') == [ToolCallPiece(0, arguments='{"a": 1}')]
    assert reader.feed(CALL_TAIL[:-1]) == [] and not reader.complete
    assert reader.feed(CALL_TAIL[-1:]) == []
    assert (reader.num_calls, reader.num_closed_calls, reader.complete) == (1, 1, True)
    assert reader.feed(CALL_SEPARATOR) == [] and not reader.complete
    assert reader.feed(call("g", "{}")) == [ToolCallPiece(1, name="g"), ToolCallPiece(1, arguments="{}")]
    assert (reader.num_calls, reader.num_closed_calls, reader.complete) == (2, 2, True)
    assert reader.finish() == []


def test_a_name_split_across_pieces_is_read_whole():
    reader = ForcedToolCallReader()
    assert reader.feed(CALL_HEAD + '"get_') == []
    assert reader.feed('weather"' + ARGUMENTS_HEAD) == [ToolCallPiece(0, name="get_weather")]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("x", "expected '<tool_call>\\n{\"name\": ', got 'x'"),
        (CALL_HEAD + '""', "the tool name '\"\"' is not a non-empty string"),
        (CALL_HEAD + "3,", "the tool name '3' is not a non-empty string"),
        (CALL_HEAD + "tru,", "the tool name 'tru' is not a JSON string"),
        (CALL_HEAD + '"f"x', "expected ', \"arguments\": ', got 'x'"),
        (call("f", "{}") + "x", "expected '\\n', got 'x'"),
    ],
)
def test_text_that_leaves_the_grammar_is_named(text, words):
    with pytest.raises(ToolCallFormatError) as info:
        ForcedToolCallReader().feed(text)
    assert str(info.value) == words
