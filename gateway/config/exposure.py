"""What a config exposes, and whether it may: auth off only on loopback or on purpose,
the operational views (/metrics, /readyz detail) only where the config chose to show
them. GatewayConfig's validator calls these; protection checks auth again at start."""

from __future__ import annotations

import ipaddress

from pydantic import Field

from gateway.config.auth import AuthConfig
from gateway.config.section import StrictSection


class ListenConfig(StrictSection):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)


class OpsConfig(StrictSection):
    """Where the operational views are served: /metrics and /readyz's per-model detail
    name every model and backend and carry upstream error text."""

    # A second listener for /metrics, /readyz and /healthz; the main one then answers
    # /readyz with the process's readiness only, and has no /metrics.
    listen: ListenConfig | None = None
    # Serve them on the main listener although it is not loopback and auth is on.
    public: bool = False


def open_auth_problem(auth: AuthConfig, listen: ListenConfig) -> str | None:
    """Auth may be off only when the config says so, or on a loopback address."""
    if auth.mode != "none" or "mode" in auth.model_fields_set:
        return None
    host = listen.host
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


def ops_exposure_refusal(ops: OpsConfig, listen: ListenConfig, auth_mode: str) -> str | None:
    """Why `config` must not be served as it is, for where it would serve the
    operational views; None when it may. The views go with the API when the main
    listener is loopback or the API is open to anyone anyway (`auth.mode: none`);
    otherwise the config must choose: an ops listener, or `ops.public: true`."""
    if ops.listen is not None:
        if ops.listen.port == listen.port and listen.port != 0:
            return f"ops.listen.port is {ops.listen.port}, the same as listen.port: give the ops listener its own port"
        return None
    if ops.public or auth_mode == "none" or is_loopback(listen.host):
        return None
    return (
        f"listen.host is {listen.host!r} and auth is on, but /metrics and /readyz's detail (every model, "
        "backend and upstream error) would be served on it to anyone: set ops.listen (a second listener, "
        "e.g. {host: 127.0.0.1, port: 9090}) or `ops: {public: true}` to serve them on the main port on purpose."
    )
