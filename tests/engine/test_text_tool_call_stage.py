"""engine/text/tool_call_stage.py without a model: the free-text (hermes) reader's
stage, one call or several, what is dropped, and the finish reason each ending gives;
the forced reader's refusals and its one-call mode."""

from __future__ import annotations

import pytest

from engine.text.forced_tool_calls import ForcedToolCallReader, ToolCallFormatError
from engine.text.hermes_format import ContentPiece, DroppedCallPiece, ToolCallPiece
from engine.text.tool_call_stage import ToolCallStage
from engine.text.tool_parser import HermesToolParser

NAMES = {"get_weather", "now"}
CALL_A = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL_B = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'


def _stage(*, forced=False, parallel=True) -> ToolCallStage:
    return ToolCallStage(forced=forced, tool_names=NAMES, parallel_tool_calls=parallel)


def _calls(pieces) -> list[tuple[int, str | None, str]]:
    return [(p.tool_index, p.name, p.arguments) for p in pieces if isinstance(p, ToolCallPiece)]


def test_the_reader_follows_who_decides_the_shape():
    assert isinstance(_stage().reader, HermesToolParser)
    assert isinstance(_stage(forced=True).reader, ForcedToolCallReader)


def test_free_text_without_calls_keeps_its_reason():
    stage = _stage()
    step = stage.step("hello", finishing=False, reason=None)
    assert [p.text for p in step.pieces if isinstance(p, ContentPiece)] == ["hello"]
    assert (step.finishing, step.reason, step.dropped) == (False, None, [])
    last = stage.step(" there", finishing=True, reason="stop")
    assert (last.finishing, last.reason) == (True, "stop")


def test_free_text_calls_finish_with_tool_calls_and_length_stays_length():
    for reason, expected in [("stop", "tool_calls"), ("length", "length")]:
        step = _stage().step(CALL_A + "\n" + CALL_B, finishing=True, reason=reason)
        assert [(i, n) for i, n, _ in _calls(step.pieces) if n] == [(0, "get_weather"), (1, "now")]
        assert step.reason == expected


def test_one_call_asked_for_ends_the_choice_when_it_is_complete():
    stage = _stage(parallel=False)
    step = stage.step(CALL_A + "\n" + CALL_B, finishing=False, reason=None)
    assert (step.finishing, step.reason) == (True, "tool_calls")
    assert {i for i, _, _ in _calls(step.pieces)} == {0}


def test_one_call_asked_for_and_none_complete_goes_on():
    step = _stage(parallel=False).step(CALL_A[:30], finishing=False, reason=None)
    assert (step.finishing, step.reason) == (False, None)


def test_several_calls_allowed_do_not_end_the_choice():
    step = _stage().step(CALL_A + "\n", finishing=False, reason=None)
    assert (step.finishing, step.reason) == (False, None)
    assert _calls(step.pieces)[0][:2] == (0, "get_weather")


def test_a_broken_call_is_dropped_for_the_log_never_sent():
    bad = '<tool_call>\n{"name": "unknown_tool", "arguments": {}}\n</tool_call>'
    step = _stage().step(bad, finishing=True, reason="stop")
    assert step.pieces == [] or all(isinstance(p, ContentPiece) for p in step.pieces)
    assert step.dropped and all(isinstance(p, DroppedCallPiece) for p in step.dropped)
    assert step.reason == "stop"


def test_the_readers_end_is_read_when_the_text_finishes():
    # what might open a tag is held until the text goes on or ends
    stage = _stage()
    assert [p.text for p in stage.step("hi <tool", finishing=False, reason=None).pieces] == ["hi "]
    last = stage.step("", finishing=True, reason="stop")
    assert [p.text for p in last.pieces] == ["<tool"] and last.reason == "stop"


@pytest.mark.parametrize("reason", ["stop", None, "abort"])
def test_forced_output_ending_inside_a_call_is_a_bug(reason):
    stage = _stage(forced=True)
    with pytest.raises(ToolCallFormatError) as info:
        stage.step(CALL_A[:40], finishing=True, reason=reason)
    assert str(info.value) == f"the output ended inside a tool call (finish reason {reason!r})"


def test_forced_output_cut_by_length_inside_its_first_call_is_an_answer():
    step = _stage(forced=True).step(CALL_A[:40], finishing=True, reason="length")
    assert step.reason == "length" and _calls(step.pieces)[0][1] == "get_weather"


def test_forced_one_call_mode_sends_only_the_first_call():
    stage = _stage(forced=True, parallel=False)
    step = stage.step(CALL_A + "\n" + CALL_B, finishing=False, reason=None)
    assert {i for i, _, _ in _calls(step.pieces)} == {0}
    assert (step.finishing, step.reason) == (True, "tool_calls")


def test_forced_parallel_calls_hold_a_second_call_until_it_closes():
    stage = _stage(forced=True)
    cut = len(CALL_A) + 1 + 30
    text = CALL_A + "\n" + CALL_B
    first = stage.step(text[:cut], finishing=False, reason=None)
    assert {i for i, _, _ in _calls(first.pieces)} == {0}
    rest = stage.step(text[cut:], finishing=True, reason="stop")
    assert [n for i, n, _ in _calls(rest.pieces) if n] == ["now"]
    assert {i for i, _, _ in _calls(rest.pieces)} == {1}
    assert rest.reason == "tool_calls"


def test_a_call_closing_as_the_next_opens_releases_only_the_closed_one():
    call_c = '<tool_call>\n{"name": "now", "arguments": {"x": 1}}\n</tool_call>'
    text = CALL_A + "\n" + CALL_B + "\n" + call_c
    one = len(CALL_A) + 1 + 30
    two = len(CALL_A) + 1 + len(CALL_B) + 1 + 30
    stage = _stage(forced=True)
    steps = [
        stage.step(text[:one], finishing=False, reason=None),
        stage.step(text[one:two], finishing=False, reason=None),
        stage.step(text[two:], finishing=True, reason="stop"),
    ]
    assert [sorted({i for i, _, _ in _calls(s.pieces)}) for s in steps] == [[0], [1], [2]]
    third = _calls(steps[2].pieces)
    assert third[0][1] == "now" and "".join(a for _, _, a in third) == '{"x": 1}'
