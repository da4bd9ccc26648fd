"""The linger after a refusal (gateway/http/limits.py): the gateway answers, closes its
side, and drops what the client still sends for LINGER_S, so that closing with unread
bytes cannot reset the connection before the answer is read; it closes at once when
the client sends more than `max_head_bytes` after the refusal, and not at exactly that.

uvicorn with the limited protocol in this process (a thread), raw sockets. The
gateway's close shows to the client as a reset of the next byte it sends. LINGER_S is
set per test: short to see the linger end, long to see the overflow end it first.
Bounds are one-sided where a loaded machine could stretch them (a close no sooner than
the linger) or far from what they tell apart (a close within 15 s of a 60 s linger)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

import gateway.http.limits as limits_module
from tests.gateway.http.test_limits import LIMITS, MAX_HEAD_BYTES, MAX_HEADERS, REQUEST_LINE, headers, serving

REFUSED = REQUEST_LINE + headers(MAX_HEADERS + 1) + b"\r\n"  # one header too many: a 431


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    yield from serving(LIMITS)


def refused(addr: tuple[str, int]) -> socket.socket:
    """A connection whose request was refused, its answer and the gateway's end read."""
    s = socket.create_connection(addr, timeout=20)
    s.sendall(REFUSED)
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 431 ")
    return s


def reset(s: socket.socket, data: bytes = b"x", wait_s: float = 0.05) -> bool:
    """Send `data`; whether the gateway had closed the connection (the bytes reset it:
    the socket's pending error, as the end of the gateway's answer was read already)."""
    try:
        s.sendall(data)
    except (ConnectionResetError, BrokenPipeError):
        return True
    time.sleep(wait_s)
    return s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0


def closed_after(s: socket.socket, bound_s: float) -> float:
    """Seconds until the gateway closes, probing with one byte at a time."""
    started = time.monotonic()
    while time.monotonic() - started < bound_s:
        if reset(s):
            return time.monotonic() - started
    raise AssertionError(f"the refused connection was still open {bound_s} s later")


def test_a_refused_connection_lingers_then_closes(server, monkeypatch) -> None:
    monkeypatch.setattr(limits_module, "LINGER_S", 0.5)
    s = refused(server)
    try:
        started = time.monotonic()
        closed_after(s, 15)
        assert time.monotonic() - started >= 0.5 * 0.9  # not before the linger (a timer's floor)
    finally:
        s.close()


def test_more_than_max_head_bytes_sent_after_a_refusal_ends_the_linger_at_once(server, monkeypatch) -> None:
    monkeypatch.setattr(limits_module, "LINGER_S", 60.0)
    s = refused(server)
    try:
        for _ in range(MAX_HEAD_BYTES // 64):  # in small reads: the count is their sum
            assert not reset(s, b"y" * 64, wait_s=0.005)
        closed_after(s, 15)  # the next byte is one too many: closed, not after 60 s
    finally:
        s.close()


def test_exactly_max_head_bytes_sent_after_a_refusal_is_dropped_and_lingers(server, monkeypatch) -> None:
    monkeypatch.setattr(limits_module, "LINGER_S", 60.0)
    s = refused(server)
    try:
        for _ in range(MAX_HEAD_BYTES // 64 - 1):
            assert not reset(s, b"y" * 64, wait_s=0.005)
        assert not reset(s, b"y" * 63, wait_s=0.3)  # MAX_HEAD_BYTES - 1 dropped in all
        assert not reset(s, b"y", wait_s=0.3)  # exactly MAX_HEAD_BYTES: read, dropped
        # Still open: the next byte is read too (closed already, it would reset), and
        # being one too many, it closes the connection.
        assert not reset(s, b"y", wait_s=0.3)
        closed_after(s, 15)
    finally:
        s.close()
