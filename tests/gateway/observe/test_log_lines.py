"""The log lines' filter (gateway/observe/log_lines.py): a message's length bound at, below
and above `LINE_LIMIT`, a record filtered once however many handlers it passes, a
traceback's and a stack's lines kept as lines and indented once, and `guard` putting one
filter on each handler of the loggers it names."""

from __future__ import annotations

import logging

import pytest

from gateway.observe.log_lines import LINE_LIMIT, SafeLines, guard, guard_handler


def record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("t", logging.INFO, __file__, 1, msg, args or None, None)


@pytest.mark.parametrize("length", [LINE_LIMIT - 1, LINE_LIMIT])
def test_a_message_up_to_the_limit_is_kept_whole(length):
    line = record("a" * length)
    assert SafeLines().filter(line)
    assert line.getMessage() == "a" * length


@pytest.mark.parametrize("length", [LINE_LIMIT + 1, 2 * LINE_LIMIT, 3 * LINE_LIMIT + 7])
def test_a_message_above_the_limit_is_cut_and_says_its_whole_length(length):
    line = record("%s", "a" * length)
    assert SafeLines().filter(line)
    assert line.getMessage() == "a" * LINE_LIMIT + f"...({length} characters)"
    assert line.args is None


def test_a_record_is_filtered_once_however_many_handlers_it_passes():
    line = record("a" * (LINE_LIMIT + 10) + " password=pw")
    first = SafeLines()
    assert first.filter(line)
    once = line.getMessage()
    assert once.endswith(f"({LINE_LIMIT + 22} characters)") and "pw" not in once[-40:]
    # A second handler's filter (or the same one again) lets it through unchanged.
    assert SafeLines().filter(line) and first.filter(line)
    assert line.getMessage() == once


def test_a_record_without_a_traceback_gets_none():
    line = record("plain")
    assert SafeLines().filter(line)
    assert line.exc_text is None and line.stack_info is None and line.getMessage() == "plain"


def test_a_traceback_already_written_is_kept_and_indented_line_by_line():
    line = record("failed")
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        line.exc_info = sys.exc_info()
    line.exc_text = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom\x1b token=tk'
    assert SafeLines().filter(line)
    assert line.exc_text == (
        '  Traceback (most recent call last):\n  File "x.py", line 1\n  ValueError: boom\\u001b token=***'
    )


def test_a_traceback_made_from_the_exception_keeps_its_lines():
    line = record("failed")
    try:
        raise ValueError("boom\nINFO forged")
    except ValueError:
        import sys

        line.exc_info = sys.exc_info()
    assert SafeLines().filter(line)
    lines = line.exc_text.split("\n")
    assert lines[0] == "  Traceback (most recent call last):"
    # The exception's own newline makes a line of its own, indented like the rest: no forged line.
    assert lines[-2:] == ["  ValueError: boom", "  INFO forged"]
    assert lines[-3].startswith("    raise ValueError") and all(text.startswith("  ") for text in lines)


def test_a_stack_is_indented_line_by_line():
    line = record("here")
    line.stack_info = 'Stack (most recent call last):\n  File "x.py", line 1, in f\nsecret=s3\x85'
    assert SafeLines().filter(line)
    assert line.stack_info == '  Stack (most recent call last):\n  File "x.py", line 1, in f\n  secret=***\\u0085'


def test_guard_puts_one_filter_on_each_handler_of_the_named_loggers():
    named, other = logging.getLogger("test_log_lines.named"), logging.getLogger("test_log_lines.other")
    handlers = [logging.NullHandler(), logging.NullHandler()]
    spare = logging.NullHandler()
    try:
        for handler in handlers:
            named.addHandler(handler)
        other.addHandler(spare)
        guard("test_log_lines.named")
        guard("test_log_lines.named")  # once each, however often it is called
        for handler in handlers:
            assert [type(f) for f in handler.filters] == [SafeLines]
        assert spare.filters == []
        guard_handler(spare)
        guard_handler(spare)
        assert [type(f) for f in spare.filters] == [SafeLines]
    finally:
        for handler in handlers:
            named.removeHandler(handler)
        other.removeHandler(spare)
