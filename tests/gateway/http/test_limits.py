"""Each head limit of gateway/http/limits.py at, below and above its boundary: uvicorn
with the limited protocol in this process (a thread), raw sockets, small limits. The
documented limits are "more than": exactly `max_headers` headers, a head of exactly
`max_head_bytes`, exactly `max_pipelined` requests queued are all served.

Each case is decided by what was sent, never by how the reads fall: a complete head is
judged by its parsed size and count, an unfinished one by the bytes and lines read."""

from __future__ import annotations

import asyncio
import re
import select
import socket
import threading
import time
from collections.abc import Iterator

import orjson
import pytest
import uvicorn

from gateway.http.limits import HeadLimits, limited_protocol

MAX_HEADERS, MAX_HEAD_BYTES, MAX_PIPELINED = 10, 2048, 3
LIMITS = HeadLimits(
    max_head_bytes=MAX_HEAD_BYTES,
    max_headers=MAX_HEADERS,
    head_timeout_s=30.0,  # never reached here: these cases are about size and count
    keepalive_timeout_s=30.0,
    max_pipelined=MAX_PIPELINED,
)
REQUEST_LINE = b"GET /x HTTP/1.1\r\n"


async def app(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(HEAD_TIMEOUT_S * 10)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def serving(limits: HeadLimits) -> Iterator[tuple[str, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, http=limited_protocol(limits), ws="none", lifespan="off", log_level="critical")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # a start-up bound only: far past any start, however loaded
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    yield sock.getsockname()[:2]
    srv.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    yield from serving(LIMITS)


# Short times for the timeout cases: each is judged by whether the gateway acted while the
# client was still sending (or waiting), never by how long it took.
HEAD_TIMEOUT_S, KEEPALIVE_S = 0.5, 0.8


@pytest.fixture(scope="module")
def quick() -> Iterator[tuple[str, int]]:
    yield from serving(
        HeadLimits(max_head_bytes=MAX_HEAD_BYTES, head_timeout_s=HEAD_TIMEOUT_S, keepalive_timeout_s=KEEPALIVE_S)
    )


PAUSE = b""  # in exchange()'s parts: a moment between two sends


def exchange(addr: tuple[str, int], *parts: bytes) -> bytes:
    """Send `parts` one after another, then read until the server closes (every request
    here ends with `connection: close`, or is refused, which closes)."""
    s = socket.create_connection(addr, timeout=20)
    try:
        for part in parts:
            if part is PAUSE:
                time.sleep(0.1)
            else:
                s.sendall(part)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out
    except ConnectionResetError:
        return out
    finally:
        s.close()


def statuses(answer: bytes) -> list[int]:
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]


def headers(n: int, *, close: bool = True) -> bytes:
    """`n` header lines in all, the last `connection: close` when `close`."""
    lines = [b"host: gw"] + [b"x-h%d: v" % i for i in range(n - 1 - close)] + ([b"connection: close"] if close else [])
    assert len(lines) == n
    return b"".join(line + b"\r\n" for line in lines)


@pytest.mark.parametrize(("count", "status"), [(MAX_HEADERS - 1, 200), (MAX_HEADERS, 200), (MAX_HEADERS + 1, 431)])
def test_a_complete_head_may_have_max_headers_and_not_one_more(server, count, status) -> None:
    assert statuses(exchange(server, REQUEST_LINE + headers(count) + b"\r\n")) == [status]


@pytest.mark.parametrize(("count", "status"), [(MAX_HEADERS - 1, 200), (MAX_HEADERS, 200), (MAX_HEADERS + 1, 431)])
def test_an_unfinished_head_is_judged_by_its_lines_on_the_same_boundary(server, count, status) -> None:
    # Sent without its blank line: refused as it stands if over (its end is never sent);
    # if not, served once it ends (sent a moment later, so that the open head is most
    # likely read on its own; read together, the complete head is judged the same).
    if status == 431:
        assert statuses(exchange(server, REQUEST_LINE + headers(count))) == [431]
    else:
        assert statuses(exchange(server, REQUEST_LINE + headers(count), PAUSE, b"\r\n")) == [status]


def head_of_parsed_size(size: int) -> bytes:
    """A complete head whose parsed size (URL, and each header's name and value + 4) is `size`."""
    fixed = [(b"host", b"gw"), (b"connection", b"close")]
    used = len(b"/x") + sum(len(n) + len(v) + 4 for n, v in fixed) + len(b"x-pad") + 4
    pad = b"a" * (size - used)
    return REQUEST_LINE + b"host: gw\r\nx-pad: " + pad + b"\r\nconnection: close\r\n\r\n"


@pytest.mark.parametrize(
    ("size", "status"), [(MAX_HEAD_BYTES - 1, 200), (MAX_HEAD_BYTES, 200), (MAX_HEAD_BYTES + 1, 431)]
)
def test_a_complete_head_may_be_max_head_bytes_and_not_one_more(server, size, status) -> None:
    assert statuses(exchange(server, head_of_parsed_size(size))) == [status]


@pytest.mark.parametrize(
    ("read", "status"), [(MAX_HEAD_BYTES - 1, 200), (MAX_HEAD_BYTES, 200), (MAX_HEAD_BYTES + 1, 431)]
)
def test_an_unfinished_head_may_hold_max_head_bytes_and_not_one_more(server, read, status) -> None:
    # An open head of `read` bytes (an unfinished header line): over the limit it is refused
    # before it ends (so its end is not sent); at or under it, the head is served once it ends.
    start = REQUEST_LINE + b"host: gw\r\nconnection: close\r\nx-pad: "
    open_head = start + b"a" * (read - len(start))
    parts = (open_head,) if status == 431 else (open_head, PAUSE, b"\r\n\r\n")
    assert statuses(exchange(server, *parts)) == [status]


def test_a_refusal_is_an_openai_error_and_closes(server) -> None:
    answer = exchange(server, REQUEST_LINE + headers(MAX_HEADERS + 1) + b"\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"connection: close" in head
    assert b'"code":"request_header_fields_too_large"' in body and b"more than 10 headers" in body


@pytest.mark.parametrize(
    ("queued", "answered"),
    [(MAX_PIPELINED - 1, MAX_PIPELINED), (MAX_PIPELINED, MAX_PIPELINED + 1), (MAX_PIPELINED + 1, MAX_PIPELINED + 1)],
)
def test_up_to_max_pipelined_requests_queue_behind_the_one_served(server, queued, answered) -> None:
    # One write: the request being served and `queued` behind it, the last one closing.
    keep = REQUEST_LINE + headers(1, close=False) + b"\r\n"
    last = REQUEST_LINE + headers(2) + b"\r\n"
    answer = exchange(server, keep * queued + last)
    # More than max_pipelined queued: what is beyond is not read, the queued ones are answered.
    assert statuses(answer) == [200] * answered


def test_past_max_pipelined_the_last_answer_queued_says_close_and_the_connection_ends(server) -> None:
    # Every request keeps the connection: the one served, max_pipelined queued, and more past them.
    keep = REQUEST_LINE + headers(1, close=False) + b"\r\n"
    answer = exchange(server, keep * (MAX_PIPELINED + 3))
    heads = [part.partition(b"\r\n\r\n")[0] for part in answer.split(b"HTTP/1.1 ")[1:]]
    assert statuses(answer) == [200] * (MAX_PIPELINED + 1)
    assert [b"connection: close" in head for head in heads] == [False] * MAX_PIPELINED + [True]


def test_a_head_too_large_is_refused_with_its_code_and_limit(server) -> None:
    answer = exchange(server, head_of_parsed_size(MAX_HEAD_BYTES + 1))
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n") and b"connection: close" in head
    error = orjson.loads(body)["error"]
    assert error["code"] == "request_header_fields_too_large" and f"({MAX_HEAD_BYTES} bytes)" in error["message"]
    assert int(dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])[b"content-length"]) == len(body)


def test_a_malformed_request_is_400_and_closed(server) -> None:
    answer = exchange(server, b"NOT HTTP AT ALL\r\n\r\n")
    assert statuses(answer) == [400] and answer.endswith(b"Invalid HTTP request received.")


def trickle(s: socket.socket, piece: bytes, for_s: float) -> bool:
    """Send `piece` every 0.1 s until the server answers or closes; False if it did
    neither within `for_s`."""
    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline:
        readable, _, _ = select.select([s], [], [], 0.1)
        if readable:
            return True
        try:
            s.sendall(piece)
        except OSError:
            return True
    return False


def read_all(s: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def test_a_head_that_never_ends_is_408_while_it_still_trickles(quick) -> None:
    with socket.create_connection(quick, timeout=20) as s:
        s.sendall(REQUEST_LINE + b"host: gw\r\n")
        assert trickle(s, b"x: 1\r\n", HEAD_TIMEOUT_S * 20)  # steady progress, never the end
        answer = read_all(s)
    assert statuses(answer) == [408]
    error = orjson.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "request_timeout" and f"within {HEAD_TIMEOUT_S:g} s" in error["message"]


def test_an_idle_connection_is_closed_and_blank_lines_do_not_keep_it(quick) -> None:
    with socket.create_connection(quick, timeout=20) as s:
        s.sendall(REQUEST_LINE + b"host: gw\r\n\r\n")
        first = b""
        while not first.endswith(b"ok"):
            first += s.recv(65536)
        assert statuses(first) == [200]
        answered = time.monotonic()
        assert trickle(s, b"\r\n", KEEPALIVE_S * 20)  # closed while the blank lines still came
        assert read_all(s) == b""
        assert time.monotonic() - answered >= KEEPALIVE_S * 0.9  # and not before the idle limit


def test_a_connection_that_never_sends_is_closed_without_an_answer(quick) -> None:
    with socket.create_connection(quick, timeout=20) as s:
        connected = time.monotonic()
        assert read_all(s) == b""  # closed by the idle limit (a socket timeout would raise)
        assert time.monotonic() - connected >= KEEPALIVE_S * 0.9  # not before it


def test_a_head_queued_behind_a_slow_answer_gets_its_time_after_it(quick) -> None:
    # The first answer takes 10 head timeouts; the second head, begun at once and ended
    # after 2, waits behind it meanwhile: not refused (its time starts when the answer
    # ends), both answered. The margins are wide for a loaded machine (8 head timeouts).
    slow = b"GET /slow HTTP/1.1\r\nhost: gw\r\n\r\n"
    with socket.create_connection(quick, timeout=20) as s:
        s.sendall(slow + REQUEST_LINE + b"host: gw\r\n")
        time.sleep(HEAD_TIMEOUT_S * 2)
        s.sendall(b"connection: close\r\n\r\n")
        assert statuses(read_all(s)) == [200, 200]


def test_an_open_head_is_counted_across_its_reads(server) -> None:
    # Two sends, each under the limits, together over them, the head never ended: refused
    # (read apart, the reads are summed; read together, the one read is over the limit).
    start = REQUEST_LINE + b"host: gw\r\nx-pad: "
    half = b"a" * ((MAX_HEAD_BYTES + 1 - len(start)) // 2)
    rest = b"a" * (MAX_HEAD_BYTES + 1 - len(start) - len(half))
    assert statuses(exchange(server, start + half, PAUSE, rest)) == [431]
    lines = [b"x-l%d: v\r\n" % i for i in range(MAX_HEADERS + 1)]
    half_lines = b"".join(lines[: len(lines) // 2])
    assert statuses(exchange(server, REQUEST_LINE + half_lines, PAUSE, b"".join(lines[len(lines) // 2 :]))) == [431]
