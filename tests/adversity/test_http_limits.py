"""What a connection can make a real gateway process hold before any request
exists (gateway/http/limits.py): raw sockets against `switchyard serve`, with short
timeouts so that the slow cases stay quick."""

from __future__ import annotations

import json
import select
import socket
import threading
import time

import pytest

from tests.procs import Process, openai_backend_config, start_gateway

HEAD_TIMEOUT_S = 1.0
KEEPALIVE_S = 1.5
MAX_PIPELINED = 16
GET = b"GET /healthz HTTP/1.1\r\nhost: gw\r\n"


@pytest.fixture(scope="module")
def gw(module_tmp, upstream):
    limits = {"head_timeout_s": HEAD_TIMEOUT_S, "keepalive_timeout_s": KEEPALIVE_S, "max_pipelined": MAX_PIPELINED}
    p = start_gateway(module_tmp, {**openai_backend_config(upstream), "limits": limits})
    yield p
    p.stop()


def connect(gw: Process, timeout: float = 10.0) -> socket.socket:
    host, port = gw.url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)))
    s.settimeout(timeout)
    return s


def send_all(s: socket.socket, data: bytes) -> bool:
    """False when the gateway closed the connection before taking everything."""
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def trickle(s: socket.socket, piece: bytes, for_s: float) -> bool:
    """Send `piece` every 0.25 s until the gateway answers or closes (it is then
    readable: sending more would only draw a reset that can drop its answer); False
    when it did neither for `for_s`."""
    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline:
        readable, _, _ = select.select([s], [], [], 0.25)
        if readable or not send_all(s, piece):
            return True
    return False


def read_until_closed(s: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def status_and_error(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower(), head
    return int(head.split()[1]), json.loads(body)["error"]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def test_an_oversized_header_line_is_431_and_closed(gw):
    s = connect(gw)
    assert send_all(s, GET + b"x-big: " + b"a" * 100_000)  # unfinished, and over 64 KiB
    status, error = status_and_error(read_until_closed(s))
    assert status == 431 and error["code"] == "request_header_fields_too_large"


def test_a_one_megabyte_header_line_is_refused(gw):
    s = connect(gw)
    send_all(s, GET + b"x-big: " + b"a" * 1_000_000 + b"\r\n\r\n")
    answer = read_until_closed(s)
    # Refused at 64 KiB: the 431 comes back, or the rest of the megabyte meets a closed socket.
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:100]


@pytest.mark.parametrize("count", [101, 10_000])
def test_too_many_headers_are_431(gw, count):
    s = connect(gw)
    send_all(s, GET + b"".join(b"x-h%d: v\r\n" % i for i in range(count)) + b"\r\n")
    answer = read_until_closed(s)
    assert answer.startswith(b"HTTP/1.1 431 ") or (count > 1000 and answer == b""), answer[:100]


def test_a_large_head_within_the_limits_is_served(gw):
    s = connect(gw)
    many = b"".join(b"x-h%d: v\r\n" % i for i in range(90))
    assert send_all(s, GET + b"x-big: " + b"a" * 40_000 + b"\r\n" + many + b"connection: close\r\n\r\n")
    assert read_until_closed(s).startswith(b"HTTP/1.1 200 ")


def test_a_head_trickled_slowly_is_408(gw):
    s = connect(gw)
    send_all(s, GET)
    # Steady progress, never the end of the head: answered while it still trickles.
    assert trickle(s, b"x-slow: 1\r\n", HEAD_TIMEOUT_S * 3)
    status, error = status_and_error(read_until_closed(s))
    assert status == 408 and error["code"] == "request_timeout"


def test_a_connection_that_never_sends_is_closed(gw):
    s = connect(gw)
    started = time.monotonic()
    assert read_until_closed(s) == b""
    # Not before the idle limit; a connection never closed would end in the socket's timeout.
    assert time.monotonic() - started > KEEPALIVE_S - 0.3


def test_an_idle_keep_alive_connection_is_closed_and_blank_lines_do_not_keep_it(gw):
    s = connect(gw)
    assert send_all(s, GET + b"\r\n")
    first = b""
    while not first.endswith(b'{"status":"ok"}'):  # the whole answer, head and body
        first += s.recv(65536)
    assert first.startswith(b"HTTP/1.1 200 ")
    # Closed while the blank lines still came: they did not extend the idle time.
    assert trickle(s, b"\r\n", KEEPALIVE_S * 3)
    assert read_until_closed(s) == b""


def test_a_pipelined_flood_is_cut_after_the_queue_and_others_are_served(gw):
    flood = connect(gw)
    send_all(flood, (GET + b"\r\n") * 2_000)
    other = connect(gw)
    assert send_all(other, GET + b"connection: close\r\n\r\n")
    assert read_until_closed(other).startswith(b"HTTP/1.1 200 ")
    answers = read_until_closed(flood).count(b"HTTP/1.1 200 ")
    # One served, MAX_PIPELINED queued behind it per read the gateway took; never the 2,000.
    assert 1 <= answers <= 4 * (MAX_PIPELINED + 1), answers


@pytest.mark.parametrize(
    "opening,chunk",
    [(b"x-endless: ", b"a" * 65536), (b"", b"x-a: b\r\n" * 8192)],
    ids=["one endless header line", "endless headers"],
)
def test_memory_stays_bounded_under_eight_endless_heads(gw, opening, chunk):
    pid = gw.child.pid
    before = rss_mib(pid)
    sent: list[int] = []

    def endless() -> None:
        s, total = connect(gw), 0
        ok = send_all(s, GET + opening)
        while ok and total < 32 * 2**20:
            ok = send_all(s, chunk)
            total += len(chunk)
        sent.append(total)
        s.close()

    threads = [threading.Thread(target=endless) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    # Each was cut off long before its 32 MiB (what it got out is mostly socket buffers).
    assert len(sent) == 8 and max(sent) < 16 * 2**20, sent
    assert rss_mib(pid) - before < 40, (before, rss_mib(pid))
    s = connect(gw)
    assert send_all(s, GET + b"connection: close\r\n\r\n")
    assert read_until_closed(s).startswith(b"HTTP/1.1 200 ")
