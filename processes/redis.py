"""The one recipe for a throwaway redis-server: loopback only, nothing persisted."""

from __future__ import annotations

import socket
from pathlib import Path

from processes.probes import Probe


def redis_server_argv(port: int, work_dir: Path) -> list[str]:
    """redis-server on 127.0.0.1:`port`, no snapshots, no append-only file;
    `work_dir` is its working directory. DEBUG is allowed from loopback, so chaos
    tests can hang the server (`DEBUG SLEEP`)."""
    return [
        "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(work_dir),
        "--enable-debug-command",
        "local",
    ]


def redis_ping(port: int, host: str = "127.0.0.1") -> Probe:
    """Ready when the server answers PING with PONG (accepting a connection is not
    enough: a loading server accepts and answers -LOADING)."""

    def probe() -> bool:
        try:
            with socket.create_connection((host, port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    return probe
