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
import socket
import struct

import pytest

from adapters.http_client import (
    ConnectError,
    ConnectionClosed,
    ConnectionPool,
    PoolTimeout,
    ReadTimeout,
)
from tests.adapters.loopback import CHUNKED, OK, chunk, forever, read_request, serve

pytestmark = pytest.mark.usefixtures("loop_errors")  # tests/adapters/conftest.py


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
        # the limit as the request set it, not what was left of it when the wait began
        assert str(first.value) == f"127.0.0.1:{port} sent nothing before the first byte within the 0.1 s limit"
        assert first.value.first_byte is True and first.value.limit_s == 0.1
        r = await pool.request("POST", "/", b"x", first_byte=5.0, idle=0.1)
        chunks = r.iter_chunks()
        assert await anext(chunks) == b"first"
        with pytest.raises(ReadTimeout) as idle:
            await anext(chunks)
        assert str(idle.value) == f"127.0.0.1:{port} sent nothing between two chunks within the 0.1 s limit"
        assert idle.value.first_byte is False and idle.value.limit_s == 0.1
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


async def test_every_slot_given_back_is_usable_again():
    async def handle(reader, writer, n):
        while True:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(1)
            writer.write(OK)
            await writer.drain()

    async with serve(handle) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}", limit=3, pool_wait=0.1)
        for _ in range(2):  # the second round needs the three slots the first gave back
            held = [await pool.request("POST", "/", b"x") for _ in range(3)]
            with pytest.raises(PoolTimeout):
                await pool.request("POST", "/", b"x")
            for r in held:
                assert await r.read() == b"ok"
                r.release()
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


async def test_a_request_cancelled_as_its_connection_opens_is_cancelled(monkeypatch):
    # A request is cancelled when its client leaves or a drain cuts it; a cancel that lands as
    # its connection opens must hold, not let the request go out and be answered all the same.
    async def answer(reader, writer, n):
        await read_request(reader)
        writer.write(OK)
        await forever()

    loop = asyncio.get_running_loop()
    connect = loop.create_connection

    async def connect_then_cancel(*args, **kwargs):
        opened = await connect(*args, **kwargs)
        request.cancel()  # in the loop iteration the connection opens in
        return opened

    async with serve(answer) as (port, _):
        pool = ConnectionPool(f"http://127.0.0.1:{port}")
        monkeypatch.setattr(loop, "create_connection", connect_then_cancel)
        request = asyncio.create_task(pool.request("POST", "/", b"x"))
        with pytest.raises(asyncio.CancelledError):
            await request
        assert pool._slots.free == pool.limit  # its slot is free again
        pool.close()


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
        # the limit as set, not what was left of it when the body's wait began
        assert info.value.first_byte is True and info.value.limit_s == 0.2
        assert "before the first byte within the 0.2 s limit" in str(info.value)
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
