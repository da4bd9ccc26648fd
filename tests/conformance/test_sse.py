"""The strict SSE parser on crafted byte streams: a clean stream has no
violation, and each rule can fail on its own."""

from __future__ import annotations

import pytest

from conformance.sse import parse_sse

CHUNK = b'{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[]}'
GOOD = b"data: " + CHUNK + b"\n\n" + b"data: " + CHUNK + b"\n\ndata: [DONE]\n\n"


def rules(body: bytes) -> list[str]:
    return [v.rule for v in parse_sse(body).violations]


def test_clean_stream_has_no_violation_and_two_chunks() -> None:
    parsed = parse_sse(GOOD)
    assert parsed.ok, parsed.violations
    assert len(parsed.chunks) == 2 and parsed.done_seen
    assert parsed.chunks[0]["object"] == "chat.completion.chunk"


def test_comments_and_crlf_are_tolerated() -> None:
    body = b": keep-alive\r\n\r\ndata: " + CHUNK + b"\r\n\r\ndata: [DONE]\r\n\r\n"
    parsed = parse_sse(body)
    assert parsed.ok, parsed.violations
    assert parsed.comments == 1 and len(parsed.chunks) == 1


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        (b"data: " + CHUNK + b"\n\n", "done-missing"),
        (b"data: " + CHUNK + b"\n\ndata: [DONE]\n\ndata: " + CHUNK + b"\n\n", "after-done"),
        (b"data: [DONE]\n\n: late comment\n\n", "after-done"),
        (b"data: " + CHUNK + b"\n\ndata: [DONE] \n\n", "done-exact"),
        (b"data: " + CHUNK + b"\ndata: [DONE]\n", "unterminated"),
        (b"data: {not json}\n\ndata: [DONE]\n\n", "json"),
        (b"data: [1, 2]\n\ndata: [DONE]\n\n", "json-object"),
        (b"data: \n\ndata: [DONE]\n\n", "empty-data"),
        (b"data:" + CHUNK + b"\n\ndata: [DONE]\n\n", "data-space"),
        (b"event: error\ndata: " + CHUNK + b"\n\ndata: [DONE]\n\n", "field"),
        (b'data: {"a":\ndata: 1}\n\ndata: [DONE]\n\n', "multiline-data"),
        (b"data: \xff\xfe\n\ndata: [DONE]\n\n", "utf8"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_each_rule_fails_on_its_own(body: bytes, rule: str) -> None:
    assert rule in rules(body)


def test_unterminated_last_event_is_not_dispatched() -> None:
    # The official client dispatches only on a blank line: the final event is lost.
    parsed = parse_sse(b"data: " + CHUNK + b"\n\ndata: [DONE]")
    assert not parsed.done_seen
    assert {"unterminated", "done-missing"} <= set(rules(b"data: " + CHUNK + b"\n\ndata: [DONE]"))


def test_id_and_retry_fields_are_allowed() -> None:
    assert rules(b"id: 7\nretry: 100\ndata: " + CHUNK + b"\n\ndata: [DONE]\n\n") == []
