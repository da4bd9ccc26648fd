"""The HTTP client's read-side back-pressure at HIGH_WATER: the protocol is fed as
asyncio feeds it, through a transport that records whether reading is paused (what the
kernel does with a paused socket is not observable in a test)."""

from __future__ import annotations

import asyncio

import pytest

import adapters.http_client as http_client
from adapters.http_client import (
    HIGH_WATER,
    ConnectionPool,
    Response,
)
from tests.adapters.loopback import CHUNKED, chunk

# ---- back-pressure: reading pauses above HIGH_WATER unread bytes ---------------------------

pytestmark = pytest.mark.usefixtures("loop_errors")  # tests/adapters/conftest.py


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.closed = False

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def close(self) -> None:
        self.closed = True

    def write(self, data) -> None:
        pass


def fed_response(head: bytes) -> tuple[Response, RecordingTransport, ConnectionPool]:
    """A response on a connection fed by hand, as asyncio feeds its protocol."""
    pool = ConnectionPool("http://127.0.0.1:9")
    conn = http_client._Connection(pool)
    transport = RecordingTransport()
    conn.connection_made(transport)
    conn.data_received(head)
    return Response(conn, pool, None, None), transport, pool


async def test_reading_pauses_above_high_water_and_resumes_when_read():
    size = 4 * HIGH_WATER
    r, transport, _ = fed_response(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
    conn = r._conn
    conn.data_received(b"a" * (HIGH_WATER // 2))
    conn.data_received(b"a" * (HIGH_WATER - HIGH_WATER // 2))
    assert transport.reading  # exactly HIGH_WATER unread: at the limit, still reading
    conn.data_received(b"a")
    assert not transport.reading  # one byte above it: paused
    conn.data_received(b"a")  # what was in flight is still taken in
    chunks = r.iter_chunks()
    assert len(await anext(chunks)) == HIGH_WATER + 2
    assert transport.reading  # read: resumed
    conn.data_received(b"b" * HIGH_WATER)
    assert transport.reading  # the count starts again from what was read
    conn.data_received(b"b")
    assert not transport.reading  # and pauses again above it
    assert await anext(chunks) == b"b" * (HIGH_WATER + 1)
    assert transport.reading


async def test_pieces_add_up_to_high_water():
    r, transport, _ = fed_response(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (4 * HIGH_WATER))
    for _ in range(2):
        r._conn.data_received(b"a" * (HIGH_WATER // 2 + 1))
    assert not transport.reading


async def test_a_paused_stream_released_at_its_last_event_resumes_to_read_its_end():
    r, transport, pool = fed_response(CHUNKED + chunk(b"data: [DONE]\n\n"))
    async for line in r.iter_lines():
        if line.startswith(b"data: [DONE]"):
            r._conn.data_received(chunk(b"x" * (HIGH_WATER + 1)))  # more arrives meanwhile
            break
    assert not transport.reading
    r.release()
    assert transport.reading  # resumed, so that the message end can be read
    r._conn.data_received(b"0\r\n\r\n")
    assert pool._idle == [r._conn] and not transport.closed


async def test_a_stream_whose_end_already_arrived_is_put_back_at_once():
    r, transport, pool = fed_response(CHUNKED + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    async for line in r.iter_lines():
        if line.startswith(b"data: [DONE]"):
            break
    r.release()
    assert pool._idle == [r._conn] and r._conn.finishing is None and not pool._finishing
