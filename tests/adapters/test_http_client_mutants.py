"""The HTTP client's rules that tests/adapters/test_http_client.py leaves open: its
error messages, the first-byte deadline of a body, the one retry of a stale
keep-alive connection, line splitting, the read-side back-pressure at HIGH_WATER,
and how a connection is kept, put back or closed after a response.

Servers are in-process (tests/adapters/loopback.py), so the order of a server's writes
and the client's timers is the event loop's, not the machine's load. The back-pressure tests feed the protocol as asyncio does, through
a transport that records whether reading is paused (what the kernel does with a
paused socket is not observable in a test)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct

import pytest

import adapters.http_client as http_client
from adapters.http_client import (
    HIGH_WATER,
    ConnectError,
    ConnectionClosed,
    ConnectionPool,
    PoolTimeout,
    ReadTimeout,
    Response,
)
from tests.adapters.loopback import CHUNKED, OK, chunk, forever, serve


@pytest.fixture(autouse=True)
async def loop_errors():
    """Every test here fails if the event loop reported an error from a callback (a
    timer or protocol method of the client that raised)."""
    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield errors
    await asyncio.sleep(0)
    loop.set_exception_handler(old)
    assert errors == []


# ---- what each error says ---------------------------------------------------------------


async def test_a_read_timeout_names_the_server_the_wait_and_which_limit():
    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")
        if n == 1:
            writer.write(CHUNKED + chunk(b"first"))
        await asyncio.sleep(3600)

    async with serve(handle) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}")
        with pytest.raises(ReadTimeout) as first:
            await pool.request("POST", "/", b"x", first_byte=0.1)
        # the wait is what was left of the deadline when the client started waiting
        assert re.fullmatch(rf"127\.0\.0\.1:{port} sent nothing for 0\.\d+ s before the first byte", str(first.value))
        assert first.value.first_byte is True and 0 < first.value.waited_s <= 0.1
        r = await pool.request("POST", "/", b"x", first_byte=5.0, idle=0.1)
        chunks = r.iter_chunks()
        assert await anext(chunks) == b"first"
        with pytest.raises(ReadTimeout) as idle:
            await anext(chunks)
        assert str(idle.value) == f"127.0.0.1:{port} sent nothing for 0.1 s between two chunks"
        assert idle.value.first_byte is False and idle.value.waited_s == 0.1
        r.close()
        pool.close()


async def test_a_pool_timeout_names_the_limit_the_server_and_the_wait():
    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(CHUNKED + chunk(b"held"))
        await asyncio.sleep(3600)

    async with serve(handle) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}", limit=1, pool_wait=0.1)
        held = await pool.request("POST", "/", b"x")
        with pytest.raises(PoolTimeout) as info:
            await pool.request("POST", "/", b"x")
        assert str(info.value) == f"all 1 connections to 127.0.0.1:{port} stayed in use for 0.1 s"
        assert info.value.waited_s == 0.1
        held.close()
        pool.close()


async def test_a_refused_connect_names_the_server_and_the_reason():
    async with serve(forever) as (port, _):
        pass  # the port is free again: nothing listens on it
    pool = ConnectionPool(f"http://127.0.0.1:{port}")
    with pytest.raises(ConnectError) as info:
        await pool.request("POST", "/", b"x")
    message = str(info.value)
    prefix = f"cannot connect to 127.0.0.1:{port}: "
    # the reason in words (strerror), not the exception's errno repr
    assert message.startswith(prefix) and len(message) > len(prefix) and "[Errno" not in message


async def test_a_connect_that_hangs_is_given_up_after_connect_timeout():
    # A listener whose backlog is full and never accepted: the next connect hangs (its
    # SYN is dropped), as to a host that does not answer.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        fillers.append(s)
    await asyncio.sleep(0.05)
    pool = ConnectionPool(f"http://127.0.0.1:{port}", connect_timeout=0.2)
    try:
        async with asyncio.timeout(10):  # without the limit the connect would hang for minutes
            with pytest.raises(ConnectError) as info:
                await pool.request("POST", "/", b"x")
        assert str(info.value) == f"connect to 127.0.0.1:{port} timed out after 0.2 s"
        # the slot the connect held is free again: a second try waits no pool time
        pool.pool_wait = 0.01
        with pytest.raises(ConnectError):
            await pool.request("POST", "/", b"x")
    finally:
        for s in fillers:
            s.close()
        listener.close()


async def test_a_server_closing_before_the_answer_is_one_error_not_a_retry():
    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")  # then closes without a word

    async with serve(handle) as (port, accepted):
        pool = ConnectionPool(f"http://127.0.0.1:{port}", limit=1, pool_wait=0.5)
        with pytest.raises(ConnectionClosed) as info:
            await pool.request("POST", "/", b"x")
        assert str(info.value) == "the server closed the connection"
        # a fresh connection is never retried (the server may have started the work)
        assert len(accepted) == 1
        # and its slot was given back
        with pytest.raises(ConnectionClosed):
            await pool.request("POST", "/", b"x")
        assert len(accepted) == 2
        pool.close()


async def test_a_reset_connection_says_why():
    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
        await writer.drain()
        await asyncio.sleep(0.1)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # linger 0: a reset, not a clean close

    async with serve(handle) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}")
        r = await pool.request("POST", "/", b"x")
        with pytest.raises(ConnectionClosed) as info:
            await r.read()
        message = str(info.value)
        assert message.startswith("the server closed the connection: ") and len(message) > 34
        r.close()
        pool.close()


async def test_an_invalid_response_is_named_and_what_came_before_it_is_delivered():
    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")
        if n == 0:
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        else:
            writer.write(CHUNKED)
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(chunk(b"hello") + b"ZZ\r\n")  # a chunk, then a bad chunk size
        await asyncio.sleep(3600)

    async with serve(handle) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}")
        with pytest.raises(ConnectionClosed) as head:
            await pool.request("POST", "/", b"x")
        assert str(head.value).startswith("invalid HTTP response: ")
        r = await pool.request("POST", "/", b"x")
        chunks = r.iter_chunks()
        assert await anext(chunks) == b"hello"
        with pytest.raises(ConnectionClosed) as body:
            await anext(chunks)
        assert str(body.value).startswith("invalid HTTP response: ")
        r.close()
        pool.close()


# ---- the first-byte deadline covers the first body bytes ----------------------------------


async def test_the_first_body_bytes_must_arrive_within_first_byte_not_idle():
    async def handle(reader, writer, n):
        while True:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(1)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")  # the head at once
            await writer.drain()
            await asyncio.sleep(0.5)
            writer.write(b"body")
            await writer.drain()

    async with serve(handle) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}")
        # past the first-byte deadline (0.2 s after sending): a first-byte timeout,
        # although there is no idle limit at all
        r = await pool.request("POST", "/", b"x", first_byte=0.2)
        with pytest.raises(ReadTimeout) as info:
            await r.read()
        assert info.value.first_byte is True
        r.close()
        # within the first-byte deadline, longer than the idle limit: delivered
        r = await pool.request("POST", "/", b"x", first_byte=3.0, idle=0.1)
        assert await r.read() == b"body"
        r.release()
        # no deadline at all: the body is waited for
        r = await pool.request("POST", "/", b"x")
        assert await r.read() == b"body"
        r.release()
        pool.close()


# ---- a stale keep-alive connection is retried once, nothing else is ---------------------


async def test_a_reused_connection_closed_unanswered_is_retried_on_a_fresh_one():
    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(1)
        writer.write(OK)
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")  # the next request on it: dropped unanswered

    async with serve(handle) as (port, accepted):
        pool = ConnectionPool(f"http://127.0.0.1:{port}", limit=1)
        for _ in range(2):
            r = await pool.request("POST", "/", b"x")
            assert await r.read() == b"ok"
            r.release()
        assert len(accepted) == 2  # the second went out again on a fresh connection
        pool.close()


async def test_a_reused_connection_that_answered_in_part_is_not_retried():
    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(1)
        writer.write(OK)
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200")  # the server had started answering: not safe to resend
        await writer.drain()

    async with serve(handle) as (port, accepted):
        pool = ConnectionPool(f"http://127.0.0.1:{port}", limit=1)
        r = await pool.request("POST", "/", b"x")
        await r.read()
        r.release()
        with pytest.raises(ConnectionClosed):
            await pool.request("POST", "/", b"x")
        assert len(accepted) == 1
        pool.close()


# ---- the request and the body as read ------------------------------------------------------


async def test_the_request_carries_its_headers_and_the_body_is_read_whole():
    heads = []

    async def handle(reader, writer, n):
        while True:
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            await reader.readexactly(1)
            if len(heads) == 1:  # the body in two writes, apart
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel")
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(b"lo")
            else:  # three chunks in one write, then two
                writer.write(CHUNKED)
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(chunk(b"a") + chunk(b"b") + chunk(b"c"))
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(chunk(b"d") + chunk(b"e") + b"0\r\n\r\n")
            await writer.drain()

    async with serve(handle) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}")
        r = await pool.request("POST", "/p", b"x", {"X-Probe": "1"})
        assert await r.read() == b"hello"
        r.release()
        assert b"\r\nX-Probe: 1\r\n" in heads[0] and heads[0].startswith(b"POST /p HTTP/1.1\r\n")
        r = await pool.request("POST", "/p", b"x")
        assert [c async for c in r.iter_chunks()] == [b"abc", b"de"]
        r.release()
        pool.close()


async def test_lines_are_split_whatever_the_chunks():
    pieces = [b"da", b"ta: 1\n\nda", b"ta: 2\n", b"\n", b"\nx\ny", b"z"]

    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(CHUNKED)
        for piece in pieces:
            await writer.drain()
            await asyncio.sleep(0.03)
            writer.write(chunk(piece))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with serve(handle) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}")
        r = await pool.request("POST", "/", b"x")
        lines = [line async for line in r.iter_lines()]
        assert lines == [b"data: 1\n", b"\n", b"data: 2\n", b"\n", b"\n", b"x\n", b"yz"]
        r.release()
        pool.close()


async def test_a_url_without_host_or_port_means_loopback_and_80():
    with pytest.raises(ValueError, match="'https'"):
        ConnectionPool("https://127.0.0.1:1")
    named = ConnectionPool("http://example.invalid")
    assert (named.host, named.port) == ("example.invalid", 80)

    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(OK)
        await writer.drain()

    async with serve(handle) as (port, _):
        pool = ConnectionPool(f"http://:{port}")
        r = await pool.request("POST", "/", b"")
        assert await r.read() == b"ok"
        r.close()
    async with serve(handle, host="127.0.0.2") as (port, _):  # only there: the host is used
        pool = ConnectionPool(f"http://127.0.0.2:{port}")
        r = await pool.request("POST", "/", b"")
        assert await r.read() == b"ok"
        r.close()


# ---- what happens to a connection after its response ----------------------------------


def stream_server(done_then, n_streams: int = 100):
    """Each request on a connection is answered by a chunked stream whose `[DONE]` goes
    out at once; `done_then(writer, n)` decides what follows (the terminator, a close)."""

    async def handle(reader, writer, n):
        for _ in range(n_streams):
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(1)
            writer.write(CHUNKED + chunk(b"data: [DONE]\n\n"))
            await writer.drain()
            if await done_then(writer, n):
                return

    return handle


async def read_to_done(pool: ConnectionPool, **kw) -> Response:
    r = await pool.request("POST", "/", b"x", **kw)
    async for line in r.iter_lines():
        if line.startswith(b"data: [DONE]"):
            break
    r.release()
    return r


async def test_a_finishing_stream_the_server_closes_frees_its_slot_at_once(monkeypatch):
    monkeypatch.setattr(http_client, "FINISH_S", 30.0)

    async def close_soon(writer, n):
        await asyncio.sleep(0.1)
        return True  # no terminator: the connection is closed

    async with serve(stream_server(close_soon)) as (port, accepted):
        pool = ConnectionPool(f"http://127.0.0.1:{port}", limit=1, pool_wait=2.0)
        await read_to_done(pool)
        await read_to_done(pool)  # within pool_wait: the close ended the first's finishing
        assert len(accepted) == 2
        pool.close()


async def test_a_finished_stream_leaves_no_timer_and_no_trace(monkeypatch, loop_errors):
    monkeypatch.setattr(http_client, "FINISH_S", 0.2)

    async def terminate(writer, n):
        await asyncio.sleep(0.02)
        writer.write(b"0\r\n\r\n")
        return False

    async with serve(stream_server(terminate)) as (port, accepted):
        pool = ConnectionPool(f"http://127.0.0.1:{port}", limit=1)
        await read_to_done(pool)
        for _ in range(100):
            if pool._idle:
                break
            await asyncio.sleep(0.01)
        assert len(pool._idle) == 1 and not pool._finishing  # no set that grows per stream
        await asyncio.sleep(0.3)  # past FINISH_S: the give-up timer was cancelled
        assert loop_errors == []
        await read_to_done(pool)
        assert len(accepted) == 1
        pool.close()


async def test_closing_the_pool_while_a_stream_finishes(monkeypatch, loop_errors):
    monkeypatch.setattr(http_client, "FINISH_S", 0.2)
    async with serve(stream_server(forever)) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}", limit=1)
        r = await read_to_done(pool)
        pool.close()
        await asyncio.sleep(0.3)
        assert r._conn.closed and loop_errors == []


async def test_release_after_an_error_frees_the_slot_at_once(monkeypatch):
    monkeypatch.setattr(http_client, "FINISH_S", 30.0)

    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(CHUNKED + chunk(b"a"))
        if n == 0:
            await asyncio.sleep(3600)  # quiet: the reader's idle limit runs out
        # n == 1: closes after its first chunk

    async with serve(handle) as (port, accepted):
        pool = ConnectionPool(f"http://127.0.0.1:{port}", limit=1, pool_wait=1.0)
        r = await pool.request("POST", "/", b"x", idle=0.1)
        with pytest.raises(ReadTimeout):
            await r.read()
        r.release()  # not read to its end: the connection is closed, its slot freed
        r = await pool.request("POST", "/", b"x")
        with pytest.raises(ConnectionClosed):
            await r.read()
        r.release()
        r = await pool.request("POST", "/", b"x")  # a third connection: the slot came back
        r.close()
        assert len(accepted) == 3
        pool.close()


async def test_a_connection_close_answer_is_not_reused():
    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(3600)  # says close, but leaves it to the client

    async with serve(handle) as (port, accepted):
        pool = ConnectionPool(f"http://127.0.0.1:{port}")
        for _ in range(2):
            r = await pool.request("POST", "/", b"x", first_byte=2.0)
            assert await r.read() == b"ok"
            r.release()
        assert len(accepted) == 2 and pool._idle == []
        pool.close()


async def test_a_connection_the_server_closed_is_not_kept():
    async def handle(reader, writer, n):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(OK)
        await writer.drain()  # then closes: keep-alive said, closed anyway

    async with serve(handle) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}")
        r = await pool.request("POST", "/", b"x")
        assert await r.read() == b"ok"
        for _ in range(100):
            if r._conn.closed:
                break
            await asyncio.sleep(0.01)
        r.release()
        assert pool._idle == []
        pool.close()


async def test_the_limit_holds_after_the_pool_is_closed_and_used_again():
    inflight = [0, 0]  # now, most

    async def handle(reader, writer, n):
        while True:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(1)
            inflight[0] += 1
            inflight[1] = max(inflight[1], inflight[0])
            await asyncio.sleep(0.05)
            inflight[0] -= 1
            writer.write(OK)
            await writer.drain()

    async with serve(handle) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}", limit=1)

        async def one():
            r = await pool.request("POST", "/", b"x")
            await r.read()
            r.release()

        await one()
        pool.close()  # the idle connection closed: no slot given back twice
        await asyncio.gather(one(), one(), one())
        assert inflight[1] == 1
        pool.close()


# ---- back-pressure: reading pauses above HIGH_WATER unread bytes ---------------------------


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
