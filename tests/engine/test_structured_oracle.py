"""The structured-output oracle (tests/engine/structured_cases.py) fails where it must."""

from __future__ import annotations

import jsonschema
import pytest

from tests.engine.structured_cases import MODES, Answer, Mode, check_answer


def _mode(name: str) -> Mode:
    return next(m for m in MODES if m.name == name)


@pytest.mark.parametrize(
    "answer",
    [
        Answer('{"name": "a", "age": 300, "role": "user", "address": {"city": "x", "zip": 12345}}', [], "stop"),
        Answer('{"name": "a", "age": 3, "role": "root", "address": {"city": "x", "zip": 12345}}', [], "stop"),
        Answer('{"name": "a", "age": 3, "role": "user"}', [], "stop"),
        Answer('{"name": "a", "age": 3, "role": "user", "address": {"city": "x", "zip": 1', [], "length"),
        Answer('{"name": "a"', [], "stop"),
        Answer(None, [("get_weather", '{"city": "x", "unit": "celsius"}')], "tool_calls"),
    ],
)
def test_oracle_rejects_bad_json_answers(answer):
    with pytest.raises((AssertionError, ValueError, jsonschema.ValidationError)):
        check_answer(_mode("json_schema"), answer, 64)


@pytest.mark.parametrize(
    "mode_name,answer",
    [
        ("tool_required", Answer('<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>', [], "stop")),
        ("tool_required", Answer(None, [("ping", "{}"), ("ping", "{}")], "tool_calls")),
        ("tool_required", Answer(None, [("get_weather", '{"city": "Paris"}')], "tool_calls")),
        ("tool_named", Answer(None, [("get_weather", '{"city": "x", "unit": "celsius"}')], "tool_calls")),
        ("parallel_calls", Answer(None, [], "tool_calls")),
        ("parallel_calls", Answer(None, [("ping", '{"extra": 1}')], "tool_calls")),
    ],
)
def test_oracle_rejects_bad_tool_answers(mode_name, answer):
    with pytest.raises((AssertionError, ValueError, jsonschema.ValidationError)):
        check_answer(_mode(mode_name), answer, 64)


def test_oracle_accepts_good_answers():
    check_answer(
        _mode("json_schema"),
        Answer(
            '{"name": "a", "age": 3, "role": "user", "tags": ["red"], "address": {"city": "x", "zip": 12345}}',
            [],
            "stop",
        ),
        64,
    )
    check_answer(
        _mode("parallel_calls"),
        Answer(None, [("ping", "{}"), ("get_weather", '{"city": "P", "unit": "celsius"}')], "tool_calls"),
        64,
    )
