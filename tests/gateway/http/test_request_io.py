"""gateway/http/request_io.py at its boundaries: a body of exactly the limit is read,
one byte more is a 413 whether the client declares it or streams it (chunked, or
lying about its length); a client's x-request-id of 1 to 128 allowed characters is
kept, anything else is not."""

from __future__ import annotations

import pytest
from starlette.requests import ClientDisconnect, Request

from adapters.errors import GatewayError
from gateway.http.request_io import client_request_id, new_request_id, read_body

LIMIT = 1024


def request(chunks: list[bytes], declared: int | None) -> Request:
    """A request whose body arrives as `chunks`, with `declared` as its content-length
    (None: chunked, no length)."""
    headers = [] if declared is None else [(b"content-length", str(declared).encode())]
    pending = list(chunks)

    async def receive() -> dict:
        body = pending.pop(0) if pending else b""
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""}
    return Request(scope, receive)


async def read(req: Request) -> bytes:
    """read_body as the front door calls it: the declared length read from the head."""
    return await read_body(req, req.headers.get("content-length"), LIMIT)


def split(size: int) -> list[bytes]:
    return [b"a" * (size // 2), b"b" * (size - size // 2)]


@pytest.mark.parametrize("size", [LIMIT - 1, LIMIT])
@pytest.mark.parametrize("declared", [True, False], ids=["declared", "chunked"])
async def test_a_body_up_to_the_limit_is_read_whole(size, declared) -> None:
    body = await read(request(split(size), size if declared else None))
    assert body == b"a" * (size // 2) + b"b" * (size - size // 2)


@pytest.mark.parametrize("declared", [LIMIT + 1, None, 10], ids=["declared", "chunked", "lying"])
async def test_one_byte_over_the_limit_is_413_however_it_is_sent(declared) -> None:
    with pytest.raises(GatewayError) as info:
        await read(request(split(LIMIT + 1), declared))
    err = info.value
    assert (err.status, err.code) == (413, "request_too_large") and f"({LIMIT} bytes)" in err.message


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    def never() -> dict:
        raise AssertionError("the body was read")

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [(b"content-length", b"1025")]}
    with pytest.raises(GatewayError) as info:
        await read(Request(scope, never))  # type: ignore[arg-type]
    assert info.value.status == 413


@pytest.mark.parametrize(
    ("value", "kept"),
    [("a", True), ("x" * 127, True), ("x" * 128, True), ("A-z.0_9:", True), ("x" * 129, False), ("", False)]
    + [("a b", False), ("é", False), (None, False)],
)
def test_a_client_request_id_is_kept_only_with_1_to_128_allowed_characters(value, kept) -> None:
    assert client_request_id(value) == (value if kept else None)


def test_the_gateway_s_own_ids_are_128_random_bits() -> None:
    ids = {new_request_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


async def test_a_client_leaving_while_its_body_comes_is_client_disconnect() -> None:
    messages = [{"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}]

    async def receive() -> dict:
        return messages.pop(0)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    with pytest.raises(ClientDisconnect):
        await read(Request(scope, receive))


async def test_a_body_in_one_message_is_that_message_s_bytes() -> None:
    assert await read(request([b'{"a": 1}'], 8)) == b'{"a": 1}'
    assert await read(request([b""], None)) == b""
