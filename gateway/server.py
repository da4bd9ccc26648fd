"""The HTTP server: uvicorn with httptools under our head limits
(gateway/http_limits.py), on the main listener and, when configured, the ops
listener. Both listeners belong to one uvicorn server, so they share one event
loop, one lifespan and one graceful stop."""

from __future__ import annotations

import uvicorn

from gateway.app import HotPath, create_app
from gateway.config import GatewayConfig
from gateway.http_limits import HeadLimits, limited_protocol


def head_limits(config: GatewayConfig) -> HeadLimits:
    limits = config.limits
    return HeadLimits(
        max_head_bytes=limits.max_head_bytes,
        max_headers=limits.max_headers,
        head_timeout_s=limits.head_timeout_s,
        keepalive_timeout_s=limits.keepalive_timeout_s,
        max_pipelined=limits.max_pipelined,
    )


def run_server(config: GatewayConfig) -> None:
    app = HotPath(create_app(config))
    uv = uvicorn.Config(
        app,
        host=config.listen.host,
        port=config.listen.port,
        log_level=config.log_level.lower(),
        access_log=False,
        http=limited_protocol(head_limits(config)),
        ws="none",
        loop="uvloop",
        timeout_keep_alive=int(config.limits.keepalive_timeout_s),
        proxy_headers=False,
        server_header=False,
    )
    sockets = [uv.bind_socket()]
    if config.ops.listen is not None:
        ops = uvicorn.Config(app, host=config.ops.listen.host, port=config.ops.listen.port).bind_socket()
        app.serve_ops_on(ops.getsockname()[1])
        sockets.append(ops)
    uvicorn.Server(uv).run(sockets=sockets)
