"""What the HTTP client does with a connection after its response: a finished
stream frees its slot at once and leaves no timer, a closed or `Connection: close`
answer is not kept, and the pool's limit holds after it is closed and used again.
Servers are in-process (tests/adapters/loopback.py)."""

from __future__ import annotations

import asyncio

import pytest

import adapters.http_client as http_client
from adapters.http_client import (
    ConnectionClosed,
    ConnectionPool,
    ReadTimeout,
    Response,
)
from tests.adapters.loopback import CHUNKED, OK, chunk, forever, serve

pytestmark = pytest.mark.usefixtures("loop_errors")  # tests/adapters/conftest.py


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
