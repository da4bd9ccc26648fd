"""The readiness probes against real servers: an in-thread HTTP server that
answers chosen statuses, and a real redis-server."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from processes import Child, free_port, http_probe, redis_ping, redis_server_argv, tcp_probe


class StatusHandler(http.server.BaseHTTPRequestHandler):
    """GET /<status> answers that status; GET /slow/<status> after 1.5 s."""

    def do_GET(self) -> None:
        path = self.path.strip("/")
        if path.startswith("slow/"):
            time.sleep(1.5)
            path = path.removeprefix("slow/")
        self.send_response(int(path))
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def status_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StatusHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.mark.parametrize(
    ("status", "ready"), [(200, True), (204, True), (404, True), (499, True), (500, False), (503, False)]
)
def test_http_probe_is_ready_below_500(status_server: str, status: int, ready: bool) -> None:
    assert http_probe(f"{status_server}/{status}")() is ready


def test_http_probe_on_a_closed_port_is_not_ready() -> None:
    assert http_probe(f"http://127.0.0.1:{free_port()}/")() is False


def test_http_probe_on_a_server_that_hangs_up_is_not_ready() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def hang_up() -> None:
            conn, _ = listener.accept()
            conn.close()

        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        assert http_probe(f"http://127.0.0.1:{port}/")() is False
        thread.join(5)


def test_tcp_probe(status_server: str) -> None:
    assert tcp_probe(int(status_server.rsplit(":", 1)[1]))() is True
    assert tcp_probe(free_port())() is False


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        assert s.getsockname()[1] == port


def test_redis_ping_against_a_real_redis_server(tmp_path: Path, status_server: str) -> None:
    port = free_port()
    assert redis_ping(port)() is False
    with Child(redis_server_argv(port, tmp_path), tmp_path / "redis.log") as redis:
        redis.wait_ready(redis_ping(port), timeout_s=10)
        assert redis.poll() is None
    assert redis_ping(port)() is False
    # An HTTP server accepts the connection but does not answer PONG.
    assert redis_ping(int(status_server.rsplit(":", 1)[1]))() is False


def test_http_probe_waits_for_a_health_check_that_takes_its_time(status_server: str) -> None:
    """SGLang's /health runs a generation and polls for it once a second: a probe that
    gave up after a second never saw such a runtime ready on a loaded machine."""
    assert http_probe(f"{status_server}/slow/200")() is True
    assert http_probe(f"{status_server}/slow/200", timeout_s=0.5)() is False
