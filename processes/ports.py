"""Free loopback ports."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now. The OS picks it and does not hand it out
    again soon, so a child told to bind it almost always gets it."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
