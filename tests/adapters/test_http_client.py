"""The gateway's own HTTP/1.1 client against a real server process."""

from __future__ import annotations

import asyncio
import time

import httpx
import orjson
import pytest

from adapters.http_client import ConnectError, ConnectionClosed, ConnectionPool, PoolTimeout, ReadTimeout
from processes import free_port

MSG = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
H = {"Content-Type": "application/json"}


def body(**kw) -> bytes:
    return orjson.dumps({**MSG, **kw})


async def test_json_request_and_keep_alive_reuse(upstream):
    pool = ConnectionPool(upstream.url)
    for _ in range(3):
        r = await pool.request("POST", "/v1/chat/completions", body(max_tokens=2), H)
        assert r.status == 200 and r.headers["content-type"] == "application/json"
        assert orjson.loads(await r.read())["choices"][0]["message"]["content"] == "alpha bravo"
        r.release()
    assert len(pool._idle) == 1  # one connection, reused three times
    pool.close()


async def test_streamed_lines(upstream):
    pool = ConnectionPool(upstream.url)
    r = await pool.request("POST", "/v1/chat/completions", body(stream=True, max_tokens=3), H)
    lines = [line async for line in r.iter_lines()]
    r.release()
    data = [line for line in lines if line.startswith(b"data: ")]
    assert data[-1] == b"data: [DONE]\n"
    assert all(line.endswith(b"\n") for line in lines)
    pool.close()


async def test_connect_refused():
    pool = ConnectionPool(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ConnectError):
        await pool.request("POST", "/x", b"", H)


async def test_close_mid_stream_reaches_the_server(upstream):
    httpx.post(upstream.url + "/_sim/reset")
    pool = ConnectionPool(upstream.url)
    r = await pool.request("POST", "/v1/chat/completions", body(stream=True, sim={"chunks": 100, "itl_ms": 20}), H)
    it = r.iter_lines()
    await it.__anext__()
    r.close()
    for _ in range(100):
        stats = httpx.get(upstream.url + "/_sim/stats").json()
        if stats["aborted"] == 1:
            break
        await asyncio.sleep(0.05)
    assert stats["aborted"] == 1 and stats["inflight"] == 0
    assert pool._idle == []


async def test_limit_bounds_concurrency_at_the_server(upstream):
    httpx.post(upstream.url + "/_sim/reset")
    pool = ConnectionPool(upstream.url, limit=2)

    async def one():
        r = await pool.request("POST", "/v1/chat/completions", body(sim={"ttft_ms": 50}), H)
        await r.read()
        r.release()

    await asyncio.gather(*(one() for _ in range(8)))
    stats = httpx.get(upstream.url + "/_sim/stats").json()
    assert stats["completed"] == 8 and stats["max_inflight"] == 2
    pool.close()


async def test_read_timeout_and_cut_response():
    loop = asyncio.get_running_loop()

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        mode = handle.mode
        if mode == "slow":
            await asyncio.sleep(2)
        elif mode == "cut":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
            await writer.drain()
        writer.close()

    handle.mode = "slow"
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = ConnectionPool(f"http://127.0.0.1:{port}")
    t = time.monotonic()
    with pytest.raises(ReadTimeout) as info:
        await pool.request("POST", "/", b"x", H, first_byte=0.2)
    # A ReadTimeout at all says the limit acted: without it the server's close after 2 s
    # would be a ConnectionClosed. No ceiling on the time: a loaded machine stretches it.
    assert time.monotonic() - t >= 0.2 and info.value.first_byte
    handle.mode = "cut"
    r = await pool.request("POST", "/", b"x", H, first_byte=0.2)
    with pytest.raises(ConnectionClosed):
        await r.read()
    r.close()
    server.close()
    await server.wait_closed()
    assert loop.is_running()


async def test_stale_keep_alive_connection_is_retried_once():
    served = []

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        served.append(1)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # the server drops every connection after one answer

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = ConnectionPool(f"http://127.0.0.1:{port}")
    for _ in range(3):
        r = await pool.request("POST", "/", b"x", H)
        assert await r.read() == b"ok"
        r.release()
        await asyncio.sleep(0.05)
    assert len(served) == 3
    server.close()
    await server.wait_closed()


async def test_a_full_pool_waits_at_most_pool_wait_for_a_connection(upstream):
    pool = ConnectionPool(upstream.url, limit=1, pool_wait=0.2)
    held = await pool.request("POST", "/v1/chat/completions", body(stream=True, sim={"chunks": 50, "itl_ms": 20}), H)
    t = time.monotonic()
    with pytest.raises(PoolTimeout) as info:
        await pool.request("POST", "/v1/chat/completions", body(max_tokens=2), H)
    # Without the limit it would wait for the held stream (about 1 s) and then be served.
    assert time.monotonic() - t >= 0.2 and info.value.waited_s == 0.2
    held.close()  # its slot is free again at once
    r = await pool.request("POST", "/v1/chat/completions", body(max_tokens=2), H)
    await r.read()
    r.release()
    pool.close()


async def test_a_stream_that_goes_quiet_times_out_between_chunks_not_before_the_first():
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(0.4)  # a slow first byte: within first_byte
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await asyncio.sleep(5)  # then silence: past idle
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    pool = ConnectionPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    r = await pool.request("POST", "/", b"x", H, first_byte=2.0, idle=0.2)
    chunks = r.iter_chunks()
    assert await anext(chunks) == b"first"
    t = time.monotonic()
    with pytest.raises(ReadTimeout) as info:
        await anext(chunks)
    # Idle, not first-byte: the ReadTimeout says so (without it, the server's close after 5 s).
    assert time.monotonic() - t >= 0.2 and not info.value.first_byte and info.value.limit_s == 0.2
    r.close()
    server.close()
    await server.wait_closed()


async def chunked_stream_server(terminator_after_s: float | None):
    """A server answering each request on a connection with a chunked SSE stream whose
    `[DONE]` goes out first and whose terminating chunk follows `terminator_after_s`
    later (None: never); it counts the connections it accepted."""
    accepted = []

    async def handle(reader, writer):
        accepted.append(writer)
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(1)  # the one-byte body the tests send
                event = b"data: [DONE]\n\n"
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
                if terminator_after_s is None:
                    await asyncio.sleep(3600)
                await asyncio.sleep(terminator_after_s)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, accepted


async def read_to_done(pool: ConnectionPool) -> None:
    r = await pool.request("POST", "/", b"x", H)
    async for line in r.iter_lines():
        if line.startswith(b"data: [DONE]"):
            break  # as the adapters stop: at the last event, before the message end
    r.release()


async def test_a_stream_read_to_done_reuses_its_connection_once_the_message_ends():
    """The message end (chunked terminator) trails `[DONE]`: the connection waits for
    it and is reused, instead of one new upstream connection per streamed request."""
    server, accepted = await chunked_stream_server(terminator_after_s=0.05)
    pool = ConnectionPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", limit=1)
    for _ in range(3):
        await read_to_done(pool)
        for _ in range(100):
            if pool._idle:
                break
            await asyncio.sleep(0.01)
    assert len(accepted) == 1 and len(pool._idle) == 1
    pool.close()
    server.close()


async def test_a_stream_whose_message_never_ends_is_closed_and_frees_its_slot(monkeypatch):
    monkeypatch.setattr("adapters.http_client.FINISH_S", 0.1)
    server, accepted = await chunked_stream_server(terminator_after_s=None)
    pool = ConnectionPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", limit=1, pool_wait=2.0)
    await read_to_done(pool)
    await read_to_done(pool)  # waits for the one slot, freed when the first gave up
    assert len(accepted) == 2 and pool._idle == []
    pool.close()
    server.close()
