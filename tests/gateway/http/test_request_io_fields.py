"""gateway/http/request_io.py's head_fields: the request's header fields by name, read
as Starlette's Headers.get reads them (the first of a repeated field, latin-1); and
read_body on ASGI messages that leave out their optional keys."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.requests import Request

from gateway.http.request_io import head_fields, read_body


def test_each_field_by_name_the_first_of_a_repeated_one_as_starlette_reads_it() -> None:
    raw = [(b"x-a", b"1"), (b"content-type", b"application/json"), (b"x-a", b"2"), (b"x-b", b"3"), (b"x-a", b"4")]
    fields = head_fields(raw)
    assert fields == {"x-a": "1", "content-type": "application/json", "x-b": "3"}
    assert all(Headers(raw=raw).get(name) == value for name, value in fields.items())


def test_names_and_values_are_latin_1() -> None:
    assert head_fields([(b"x-\xe9", b"caf\xe9")]) == {"x-é": "café"}


def test_no_field_is_an_empty_mapping() -> None:
    assert head_fields([]) == {}


def receiving(*messages: dict) -> Request:
    """A request whose receive gives `messages`, then a disconnect."""
    pending = list(messages)

    async def receive() -> dict:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}, receive)


async def test_a_message_without_body_or_more_body_is_an_empty_last_one() -> None:
    # ASGI: `body` defaults to b"" and `more_body` to False.
    assert await read_body(receiving({"type": "http.request"}), None, 10) == b""
    assert await read_body(receiving({"type": "http.request", "body": b"ab"}), None, 10) == b"ab"
    parts = ({"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.request"})
    assert await read_body(receiving(*parts), None, 10) == b"ab"
