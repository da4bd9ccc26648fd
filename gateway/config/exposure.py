"""What a config exposes, and whether it may: auth off only on loopback or on purpose,
the operational views (/metrics, /readyz detail) only where the config chose to show
them. GatewayConfig's validator calls these; protection checks auth again at start."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the config module imports this one to validate itself
    from gateway.config.schema import GatewayConfig


def open_auth_problem(config: GatewayConfig) -> str | None:
    """Auth may be off only when the config says so, or on a loopback address."""
    if config.auth.mode != "none" or "mode" in config.auth.model_fields_set:
        return None
    host = config.listen.host
    if is_loopback(host):
        return None
    return (
        f"listen.host is {host!r} but auth is not configured: set auth.mode "
        "(keys, jwt, keys+jwt), or `auth: {mode: none}` to serve without auth on purpose."
    )


def is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ops_exposure_refusal(config: GatewayConfig) -> str | None:
    """Why `config` must not be served as it is, for where it would serve the
    operational views; None when it may. The views go with the API when the main
    listener is loopback or the API is open to anyone anyway (`auth.mode: none`);
    otherwise the config must choose: an ops listener, or `ops.public: true`."""
    ops, listen = config.ops, config.listen
    if ops.listen is not None:
        if ops.listen.port == listen.port and listen.port != 0:
            return f"ops.listen.port is {ops.listen.port}, the same as listen.port: give the ops listener its own port"
        return None
    if ops.public or config.auth.mode == "none" or is_loopback(listen.host):
        return None
    return (
        f"listen.host is {listen.host!r} and auth is on, but /metrics and /readyz's detail (every model, "
        "backend and upstream error) would be served on it to anyone: set ops.listen (a second listener, "
        "e.g. {host: 127.0.0.1, port: 9090}) or `ops: {public: true}` to serve them on the main port on purpose."
    )
