"""adapters/transport.py: where a POST goes, which limit bounds each wait, what every
failure becomes (the gateway's error: status, code, failure kind, the words the client
reads), the cold GET, and the runtime's abort calls sent from tasks of their own.

Servers are in-process (tests/adapters/loopback.py): a server's delays and the client's
timers run on one event loop, so "the answer comes at 0.5 s, the limit is 0.2 s" is
decided by the loop, not by the machine's load."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import aiohttp
import pytest

from adapters.dialect import Call
from adapters.errors import THE_BACKEND, FailureKind, GatewayError
from adapters.http_client import ConnectionClosed, ReadTimeout
from adapters.transport import Transport
from tests.adapters.loopback import CHUNKED, OK, chunk, forever, read_request, serve


def answer_after(delay_s: float, head_first: bool = False):
    """A server answering every request "ok", `delay_s` after it arrived (the head at
    once and the body after the delay, with `head_first`)."""

    async def handle(reader, writer, n):
        while True:
            await read_request(reader)
            if head_first:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
                await writer.drain()
                await asyncio.sleep(delay_s)
                writer.write(b"ok")
            else:
                await asyncio.sleep(delay_s)
                writer.write(OK)
            await writer.drain()

    return handle


async def test_a_post_goes_under_the_url_s_path_with_its_headers_and_body():
    seen = []

    async def handle(reader, writer, n):
        seen.append(await read_request(reader))
        writer.write(b'HTTP/1.1 201 Created\r\nContent-Length: 7\r\n\r\n{"a":1}')
        await writer.drain()

    async with serve(handle) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}/root/")
        assert t.base_url == f"http://127.0.0.1:{port}/root"
        resp = await t.open("/v1/x", b'{"q":2}', {"X-Request-Id": "r1"}, stream=False)
        assert resp.status == 201 and await t.read(resp) == b'{"a":1}'
        resp.release()
        await t.aclose()
    head, body = seen[0]
    assert head.startswith(b"POST /root/v1/x HTTP/1.1\r\n") and b"\r\nX-Request-Id: r1\r\n" in head
    assert body == b'{"q":2}'


async def test_only_the_url_s_trailing_slashes_are_dropped():
    seen = []

    async def handle(reader, writer, n):
        seen.append((await read_request(reader))[0].split(b"\r\n")[0])
        writer.write(OK)
        await writer.drain()

    async with serve(handle) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}/apiX//")
        assert t.base_url == f"http://127.0.0.1:{port}/apiX"
        resp = await t.open("/v1", b"", {}, stream=False)
        await t.read(resp)
        resp.release()
        await t.aclose()
    assert seen == [b"POST /apiX/v1 HTTP/1.1"]


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_hung_connect_is_unavailable_after_connect_timeout_s(scheme, caplog):
    # a listener whose backlog is full and never accepted: the next connect hangs; one
    # answer whatever the scheme (https goes through aiohttp, http through the fast client)
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
    t = Transport("b", f"{scheme}://127.0.0.1:{port}", connect_timeout_s=0.2, first_byte_timeout_s=30.0)
    try:
        # 3 s: far past the 0.2 s limit, well before the pool's own 5 s default
        async with asyncio.timeout(3):
            with pytest.raises(GatewayError) as info:
                await t.open("/", b"x", {}, stream=True)
        assert (info.value.status, info.value.code, info.value.failure) == (
            503,
            "backend_unavailable",
            FailureKind.CONNECT,
        )
        # the log names the backend and the client's own words, which name the address
        [line] = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
        assert line.startswith("backend b unavailable: ") and f"127.0.0.1:{port}" in line
    finally:
        for s in fillers:
            s.close()
        listener.close()
        await t.aclose()


@pytest.mark.parametrize(
    ("stream", "limits", "times_out"),
    [
        # a stream's first byte: first_byte_timeout_s, not timeout_s
        (True, {"first_byte_timeout_s": 0.2, "timeout_s": 5.0}, True),
        (True, {"first_byte_timeout_s": 5.0, "timeout_s": 0.2}, False),
        # a whole answer's: timeout_s, not first_byte_timeout_s
        (False, {"first_byte_timeout_s": 0.2, "timeout_s": 5.0}, False),
        (False, {"first_byte_timeout_s": 5.0, "timeout_s": 0.2}, True),
    ],
)
async def test_the_first_byte_limit_of_a_stream_and_of_a_whole_answer(stream, limits, times_out, caplog):
    async with serve(answer_after(0.5)) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}", **limits)
        if times_out:
            with pytest.raises(GatewayError) as info:
                await t.open("/", b"x", {}, stream=stream)
            err = info.value
            assert (err.status, err.code, err.failure) == (504, "upstream_timeout", FailureKind.TIMEOUT)
            assert str(err).endswith("did not start answering within 0.2 s.")  # the limit, as configured
            assert (
                f"backend b timed out: 127.0.0.1:{port} sent nothing before the first byte within the 0.2 s limit"
                in caplog.text
            )
        else:
            resp = await t.open("/", b"x", {}, stream=stream)
            assert await t.read(resp) == b"ok"
            resp.release()
        await t.aclose()


async def test_a_late_first_byte_after_the_head_states_the_configured_limit():
    # the head at 0.1 s, the body at 0.6 s: the body's wait had 0.2 s of the 0.3 s left
    async def handle(reader, writer, n):
        await read_request(reader)
        await asyncio.sleep(0.1)
        writer.write(CHUNKED)
        await writer.drain()
        await asyncio.sleep(0.5)
        writer.write(chunk(b"a") + b"0\r\n\r\n")
        await writer.drain()
        await forever()

    async with serve(handle) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}", first_byte_timeout_s=0.3, stream_idle_timeout_s=5.0)
        resp = await t.open("/", b"x", {}, stream=True)
        with pytest.raises(GatewayError) as info:
            await t.read(resp)
        assert (info.value.status, info.value.failure) == (504, FailureKind.TIMEOUT)
        assert str(info.value).endswith("did not start answering within 0.3 s.")
        resp.close()
        await t.aclose()


@pytest.mark.parametrize(
    ("stream", "limits", "times_out"),
    [
        (True, {"stream_idle_timeout_s": 0.2, "timeout_s": 5.0}, True),
        (True, {"stream_idle_timeout_s": 5.0, "timeout_s": 0.2}, False),
        (False, {"stream_idle_timeout_s": 0.2, "timeout_s": 5.0}, False),
        (False, {"stream_idle_timeout_s": 5.0, "timeout_s": 0.2}, True),
    ],
)
async def test_the_silence_limit_between_chunks(stream, limits, times_out):
    async def handle(reader, writer, n):
        await read_request(reader)
        writer.write(CHUNKED + chunk(b"a"))
        await writer.drain()
        await asyncio.sleep(0.5)
        writer.write(chunk(b"b") + b"0\r\n\r\n")
        await writer.drain()
        await forever()

    async with serve(handle) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}", first_byte_timeout_s=5.0, **limits)
        resp = await t.open("/", b"x", {}, stream=stream)
        if times_out:
            with pytest.raises(GatewayError) as info:
                await t.read(resp)
            err = info.value
            assert (err.status, err.code, err.failure) == (504, "upstream_timeout", FailureKind.TIMEOUT)
            assert str(err).endswith("stopped sending in the middle of its answer within 0.2 s.")
            resp.close()
        else:
            assert await t.read(resp) == b"ab"
            resp.release()
        await t.aclose()


async def test_a_full_pool_is_busy_with_a_retry_after(caplog):
    async with serve(answer_after(0.5, head_first=True)) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}", max_connections=1, pool_wait_s=0.1)
        held = await t.open("/", b"x", {}, stream=True)
        with pytest.raises(GatewayError) as info:
            await t.open("/", b"x", {}, stream=True)
        err = info.value
        assert (err.status, err.code, err.failure, err.retry_after) == (503, "backend_busy", FailureKind.OVERLOAD, 1.0)
        assert "(waited 0.1 s)" in str(err)
        assert f"backend b busy: all 1 connections to 127.0.0.1:{port} stayed in use for 0.1 s" in caplog.text
        held.close()
        await t.aclose()


async def test_no_connection_and_a_closed_one_are_unavailable(caplog):
    async with serve(forever) as (port, _):
        pass  # nothing listens on the port any more
    t = Transport("b", f"http://127.0.0.1:{port}")
    with caplog.at_level(logging.WARNING), pytest.raises(GatewayError) as refused:
        await t.open("/", b"x", {}, stream=False)
    assert f"backend b unavailable: cannot connect to 127.0.0.1:{port}: " in caplog.text
    assert (refused.value.status, refused.value.code, refused.value.failure) == (
        503,
        "backend_unavailable",
        FailureKind.CONNECT,
    )

    async def close_unanswered(reader, writer, n):
        await read_request(reader)

    async with serve(close_unanswered) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}")
        with pytest.raises(GatewayError) as closed:
            await t.open("/", b"x", {}, stream=False)
        assert (closed.value.status, closed.value.code) == (503, "backend_unavailable")
        await t.aclose()


async def test_an_answer_cut_short_is_an_upstream_error(caplog):
    async def handle(reader, writer, n):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart")
        await writer.drain()

    async with serve(handle) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}")
        resp = await t.open("/", b"x", {}, stream=False)
        with caplog.at_level(logging.WARNING, logger="adapters.errors"), pytest.raises(GatewayError) as info:
            await t.read(resp)
        resp.close()
        await t.aclose()
    err = info.value
    assert (err.status, err.code, str(err)) == (502, "upstream_error", f"{THE_BACKEND} failed: it cut its answer short")
    # what broke is logged, not told
    assert "the server closed the connection" in caplog.text


def test_a_broken_read_becomes_the_gateway_s_error(caplog):
    t = Transport("b", "http://127.0.0.1:9", timeout_s=11.0, first_byte_timeout_s=7.0, stream_idle_timeout_s=3.0)
    first = t.failure(ReadTimeout("quiet", 0.5, True), stream=True)
    assert (first.status, first.failure) == (504, FailureKind.TIMEOUT)
    assert str(first).endswith("did not start answering within 0.5 s.")
    mid = t.failure(ReadTimeout("quiet", 0.25, False), stream=False)
    assert (mid.status, mid.failure) == (504, FailureKind.TIMEOUT)
    assert str(mid).endswith("stopped sending in the middle of its answer within 0.25 s.")
    # aiohttp's one read limit (https): a stream's is the larger of its two limits, and it
    # ran out in the middle of the answer (the head had come)
    assert str(t.failure(TimeoutError(), stream=True)).endswith(
        "stopped sending in the middle of its answer within 7 s."
    )
    t.first_byte_timeout_s, t.stream_idle_timeout_s = 3.0, 7.0
    assert str(t.failure(TimeoutError(), stream=True)).endswith("within 7 s.")
    timed_out = t.failure(TimeoutError(), stream=False)
    assert (timed_out.status, timed_out.failure) == (504, FailureKind.TIMEOUT) and str(timed_out).endswith(
        "within 11 s."
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        t.failure(ReadTimeout("quiet for 1 s", 1.0, True), stream=True)
        t.failure(TimeoutError(), stream=True)
        t.failure(TimeoutError("sock_read"), stream=False)
        cut = t.failure(aiohttp.ClientPayloadError(), stream=True)
        closed = t.failure(ConnectionClosed("gone"), stream=False)
    # the log names the backend and what happened (a timeout without words says so)
    assert [r.getMessage() for r in caplog.records] == [
        "backend b timed out: quiet for 1 s",
        "backend b timed out: timeout",
        "backend b timed out: sock_read",
        "backend b failed: it cut the stream short (ClientPayloadError)",
        "backend b failed: it cut its answer short (gone)",
    ]
    assert (cut.status, cut.code, str(cut)) == (502, "upstream_error", f"{THE_BACKEND} failed: it cut the stream short")
    assert str(closed) == f"{THE_BACKEND} failed: it cut its answer short"


async def test_get_reads_a_cold_path_within_its_limit():
    seen = []

    async def handle(reader, writer, n):
        while True:
            head, _ = await read_request(reader)
            seen.append(head.split(b"\r\n")[0])
            if b"/slow" in head:
                await asyncio.sleep(1.0)
            writer.write(b"HTTP/1.1 503 Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
            await writer.drain()

    async with serve(handle) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}/root")
        assert await t.get("/health") == (503, b"busy")
        with pytest.raises(TimeoutError):
            await t.get("/slow", timeout_s=0.2)
        await t.aclose()
        assert t._session is None
    assert seen[0] == b"GET /root/health HTTP/1.1"


async def test_abort_calls_go_out_from_their_own_task_and_aclose_waits_for_them(caplog):
    seen = []

    async def handle(reader, writer, n):
        while True:
            head, body = await read_request(reader)
            await asyncio.sleep(0.2)
            seen.append((head, body))
            status = b"200 OK" if b"/ok" in head else b"404 Not Found"
            writer.write(b"HTTP/1.1 %s\r\nContent-Length: 0\r\n\r\n" % status)
            await writer.drain()

    async with serve(handle) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}/root")
        calls = [Call("/abort/ok", {"id": "r1"}), Call("/abort/missing", {"id": "r1"})]
        headers = {"X-Request-Id": "r1"}
        with caplog.at_level(logging.DEBUG, logger="adapters.transport"):
            t.abort(calls, headers, "upgrade the runtime")
            t.abort(calls[1:], headers, "upgrade the runtime")
            assert seen == [] and headers == {"X-Request-Id": "r1"}  # sent later, the caller's dict untouched
            await t.aclose()
        assert len(seen) == 3 and not t._aborts
    lines = sorted(head.split(b"\r\n")[0] for head, _ in seen)
    assert lines == [b"POST /root/abort/missing HTTP/1.1"] * 2 + [b"POST /root/abort/ok HTTP/1.1"]
    ok_head, ok_body = next((head, body) for head, body in seen if b"/abort/ok" in head)
    assert ok_body == b'{"id":"r1"}' and b"\nX-Request-Id: r1\r\n" in ok_head
    assert b"\ncontent-type: application/json\r\n" in ok_head.lower()
    refusals = [r for r in caplog.records if r.levelno == logging.WARNING]
    # a refusal is logged once per transport, with its status, path and hint
    assert len(refusals) == 1
    assert refusals[0].getMessage() == "backend b answered HTTP 404 to /abort/missing: upgrade the runtime"


async def test_an_abort_that_fails_moves_on_to_the_next_call(caplog, monkeypatch):
    monkeypatch.setattr("adapters.transport.ABORT_TIMEOUT_S", 0.2)
    seen = []

    async def handle(reader, writer, n):
        head, _ = await read_request(reader)
        seen.append(head.split(b"\r\n")[0])
        if b"/hang" in head:
            await forever()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    async with serve(handle) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}")
        with caplog.at_level(logging.DEBUG, logger="adapters.transport"):
            t.abort([Call("/hang", {}), Call("/next", {})], {}, "hint")
            await t.aclose()
    assert seen == [b"POST /hang HTTP/1.1", b"POST /next HTTP/1.1"]
    # the timeout has no words of its own: the line ends at "failed: "
    assert [r.getMessage() for r in caplog.records if r.name == "adapters.transport"] == [
        "abort Call(path='/hang', body={}) on backend b failed: "
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_aclose_waits_for_aborts_at_most_their_limit(monkeypatch):
    monkeypatch.setattr("adapters.transport.ABORT_TIMEOUT_S", 0.2)
    async with serve(forever) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}")
        t.abort([Call("/hang", {})], {}, "hint")
        loop = asyncio.get_running_loop()
        start = loop.time()
        await t.aclose()
        # the abort's own limit (ABORT_TIMEOUT_S) ends it first; aclose's bound is above it
        assert 0.2 <= loop.time() - start and not t._aborts


async def test_aclose_waits_no_longer_than_one_abort_limit_and_a_half_second(monkeypatch):
    monkeypatch.setattr("adapters.transport.ABORT_TIMEOUT_S", 0.2)
    async with serve(forever) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}")
        # five calls that each hang to their 0.2 s limit: 1 s in all, past aclose's 0.7 s
        t.abort([Call(f"/hang{i}", {}) for i in range(5)], {}, "hint")
        await t.aclose()
        (left,) = t._aborts  # still running: aclose stopped waiting for it
        left.cancel()
        await asyncio.gather(left, return_exceptions=True)


async def test_aclose_closes_the_idle_connections():
    closed = asyncio.Event()

    async def handle(reader, writer, n):
        await read_request(reader)
        writer.write(OK)
        await writer.drain()
        if await reader.read(1) == b"":
            closed.set()

    async with serve(handle) as (port, _):
        t = Transport("b", f"http://127.0.0.1:{port}")
        resp = await t.open("/", b"x", {}, stream=False)
        await t.read(resp)
        resp.release()
        await t.aclose()
        await asyncio.wait_for(closed.wait(), 5)
