"""Readiness probes: a `Probe` is a call that says, without raising, whether a
child serves yet."""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.request
from collections.abc import Callable

Probe = Callable[[], bool]

# Loopback addresses never go through a proxy, whatever http_proxy says.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_probe(url: str, timeout_s: float = 5.0) -> Probe:
    """Ready when a GET of `url` answers with a status below 500: a 4xx still
    means the server is up and serving; a 5xx (e.g. 503 while warming up) does not.
    `timeout_s` is generous because a runtime's health check may itself take a
    second or more (SGLang's /health runs a generation and polls for it once a
    second): a shorter one never sees it ready on a loaded machine."""

    def probe() -> bool:
        try:
            with _DIRECT.open(url, timeout=timeout_s) as response:
                return response.status < 500
        except urllib.error.HTTPError as exc:
            exc.close()
            return exc.code < 500
        except (OSError, http.client.HTTPException):
            return False

    return probe


def tcp_probe(port: int, host: str = "127.0.0.1", timeout_s: float = 0.5) -> Probe:
    """Ready when a TCP connection to `host:port` is accepted."""

    def probe() -> bool:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return True
        except OSError:
            return False

    return probe
