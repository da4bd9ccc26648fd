"""gateway/http/limits.py: which bytes of a read count toward an open head, and the head
timer's life on a keep-alive connection (uvicorn with the limited protocol in this
process, raw sockets, as in test_limits.py).

A read counts toward the head it leaves open only when it holds nothing of another
request: not the end of a request served before it, not a body still arriving. A head
queued behind an answer gets its time after that answer, and a timer a head no longer
needs never fires on the connection later."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from gateway.http.limits import HeadLimits, limited_protocol
from tests.gateway.http.test_limits import LIMITS, MAX_HEAD_BYTES, MAX_HEADERS, PAUSE, REQUEST_LINE, exchange, statuses
from tests.gateway.http.test_limits import headers as header_lines

SLOW_S, HEAD_TIMEOUT_S, KEEPALIVE_S = 1.2, 0.3, 1.5


async def app(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(SLOW_S)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def serving(limits: HeadLimits, **logging_options) -> Iterator[tuple[str, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    options = logging_options or {"log_level": "critical"}
    config = uvicorn.Config(app, http=limited_protocol(limits), ws="none", lifespan="off", **options)
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # a start-up bound only
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    yield sock.getsockname()[:2]
    srv.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    yield from serving(LIMITS)


@pytest.fixture(scope="module")
def quick() -> Iterator[tuple[str, int]]:
    yield from serving(
        HeadLimits(max_head_bytes=MAX_HEAD_BYTES, head_timeout_s=HEAD_TIMEOUT_S, keepalive_timeout_s=KEEPALIVE_S)
    )


KEEP = REQUEST_LINE + header_lines(2, close=False) + b"\r\n"  # a keep-alive request


def test_the_end_of_a_request_is_not_counted_toward_the_head_opened_after_it(server) -> None:
    # One read: a whole request of MAX_HEADERS - 2 headers and the start of the next (3
    # lines): over MAX_HEADERS lines together, each within it. Both are served.
    first = REQUEST_LINE + header_lines(MAX_HEADERS - 2, close=False) + b"\r\n"
    start = REQUEST_LINE + b"host: gw\r\nx-a: 1\r\nx-b: 2\r\n"
    assert (first + start).count(b"\n") - 2 > MAX_HEADERS
    assert statuses(exchange(server, first + start, PAUSE, b"connection: close\r\n\r\n")) == [200, 200]


def test_a_body_still_arriving_is_not_counted_toward_the_head_after_it(server) -> None:
    # The body (most of MAX_HEAD_BYTES) and the next head's start in one read: the head
    # alone is far under the limit, body and head together over it. Both are served.
    body = b"b" * (MAX_HEAD_BYTES - 50)
    post = b"POST /x HTTP/1.1\r\nhost: gw\r\ncontent-length: %d\r\n\r\n" % len(body)
    start = REQUEST_LINE + b"host: gw\r\nx-pad: " + b"a" * 60 + b"\r\n"
    assert len(body + start) > MAX_HEAD_BYTES
    assert statuses(exchange(server, post, PAUSE, body + start, PAUSE, b"connection: close\r\n\r\n")) == [200, 200]


@pytest.mark.parametrize(("read", "status"), [(MAX_HEAD_BYTES, 200), (MAX_HEAD_BYTES + 1, 431)])
def test_an_unfinished_head_after_a_served_request_is_counted_from_its_first_read(server, read, status) -> None:
    # The second request of a keep-alive connection, in a read of its own: an open head of
    # `read` bytes, refused over the limit (its end never sent), served at it.
    start = REQUEST_LINE + b"host: gw\r\nconnection: close\r\nx-pad: "
    open_head = start + b"a" * (read - len(start))
    parts = (KEEP, PAUSE, open_head) + (() if status == 431 else (PAUSE, b"\r\n\r\n"))
    assert statuses(exchange(server, *parts)) == [200, status]


def read_until_closed(addr: tuple[str, int], *parts: bytes | float) -> tuple[bytes, float]:
    """Send `parts` (a number: a pause of that many seconds); what came back, and when
    the connection closed (seconds after the first send)."""
    with socket.create_connection(addr, timeout=20) as s:
        started = time.monotonic()
        for part in parts:
            if isinstance(part, float):
                time.sleep(part)
            else:
                s.sendall(part)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out, time.monotonic() - started


SLOW = b"GET /slow HTTP/1.1\r\nhost: gw\r\n\r\n"


def test_a_head_queued_behind_a_slow_answer_times_out_after_it(quick) -> None:
    answer, _ = read_until_closed(quick, SLOW + REQUEST_LINE + b"host: gw\r\n")
    assert statuses(answer) == [200, 408]


def test_a_queued_head_that_ended_leaves_no_timer_behind(quick) -> None:
    # The second head waits behind the slow answer (its timer re-armed meanwhile), ends,
    # is served and the connection then idles: closed by the idle limit, no 408.
    answer, closed = read_until_closed(quick, SLOW + REQUEST_LINE + b"host: gw\r\n", 2 * HEAD_TIMEOUT_S, b"\r\n")
    assert statuses(answer) == [200, 200] and closed >= KEEPALIVE_S


def test_the_next_head_on_a_connection_gets_a_timer_of_its_own(quick) -> None:
    # The first head comes in two reads (a timer armed, then cancelled when it ends); the
    # second never ends: 408 for it too.
    answer, _ = read_until_closed(quick, REQUEST_LINE + b"host: gw\r\n", 0.05, b"\r\n", 0.05, REQUEST_LINE)
    assert statuses(answer) == [200, 408]


def test_a_head_begun_in_the_read_that_ended_the_one_before_is_counted(server) -> None:
    # The first head ends in the read that also brings the next one's start, an unfinished
    # header over MAX_HEAD_BYTES: refused at once. The first answer is being written then,
    # so the connection is closed rather than answered twice (module docstring).
    start = REQUEST_LINE + b"host: gw\r\nx-pad: " + b"a" * MAX_HEAD_BYTES
    assert exchange(server, REQUEST_LINE + b"host: gw\r\n", PAUSE, b"\r\n" + start) == b""


def test_a_request_after_blank_lines_within_the_idle_time_is_served(quick) -> None:
    # Blank lines between requests start none (nor extend the idle time: test_limits.py);
    # the request that follows them in time is served.
    answer, _ = read_until_closed(
        quick, KEEP, 0.1, b"\r\n", 0.1, b"\r\n", 0.1, REQUEST_LINE + b"connection: close\r\n\r\n"
    )
    assert statuses(answer) == [200, 200]


@pytest.fixture(scope="module")
def logging_server() -> Iterator[tuple[str, int]]:
    # uvicorn's own logging left unconfigured: its loggers propagate to pytest's capture.
    yield from serving(LIMITS, log_config=None)


def test_a_malformed_request_is_logged_as_uvicorn_logs_it(logging_server, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="uvicorn.error"):
        assert statuses(exchange(logging_server, b"NOT HTTP AT ALL\r\n\r\n")) == [400]
    assert ("uvicorn.error", logging.WARNING, "Invalid HTTP request received.") in caplog.record_tuples
