"""adapters/openai_wire.py's SSEData at its edges: CRLF bodies read line by line, a chunk
that starts with a newline, events of several data lines among single-line ones, the
last event at the body's end with its own line endings, and an empty body."""

from __future__ import annotations

from adapters.openai_wire import SSEData


def test_a_crlf_body_is_read_line_by_line() -> None:
    sse = SSEData()
    assert sse.feed(b"data: a\r\n\r\ndata: b\r\n\r\n") == [b"a", b"b"]


def test_a_chunk_that_starts_with_the_newline_of_an_open_event() -> None:
    sse = SSEData()
    assert sse.feed(b"data: a\r\n") == []
    assert sse.feed(b"\ndata: b\n\n") == [b"a", b"b"]


def test_an_event_of_several_data_lines_keeps_its_place_among_single_line_ones() -> None:
    sse = SSEData()
    assert sse.feed(b"data: a\ndata: b\n\ndata: c\n\n") == [b"a\nb", b"c"]
    assert sse.end() == []


def test_the_last_event_needs_no_blank_line_and_keeps_its_own_trailing_characters() -> None:
    sse = SSEData()
    assert sse.feed(b"data: x\r\n\r\ndata: aX\r\ndata: b \r") == [b"x"]
    assert sse.end() == [b"aX\nb "]


def test_an_empty_body_has_no_events() -> None:
    assert SSEData().end() == []


def test_the_last_line_at_the_end_loses_only_its_carriage_return() -> None:
    sse = SSEData()
    assert sse.feed(b"data: x\r\n\r\ndata: aX\r") == [b"x"]
    assert sse.end() == [b"aX"]
