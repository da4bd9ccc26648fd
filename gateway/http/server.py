"""The HTTP server: uvicorn with httptools under our head limits
(gateway/http/limits.py), on the main listener and, when configured, the ops
listener (one server: one event loop, one lifespan). The signals are the gateway's
(gateway/lifecycle/process.py; docs/operations.md, "Drain and rolling updates"):
SIGTERM drains, SIGINT drains without the grace, SIGHUP reloads; once the drain is
over the server is told to stop and the process exits 0 (uvicorn's own handling
would wait for connections without bound, then die of the signal). Under
`serve --workers N` each worker runs this on sockets of its own (SO_REUSEPORT).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import sys

import uvicorn

from gateway.app import Gateway, HotPath, create_app
from gateway.config.schema import GatewayConfig
from gateway.http.limits import HeadLimits, limited_protocol
from gateway.lifecycle.process import Lifecycle
from gateway.lifecycle.reload import ConfigSource
from gateway.lifecycle.workers import WorkerSlot, listening_socket
from gateway.observe.log_lines import guard, guard_handler

# After the drain, what uvicorn still waits for (idle keep-alive connections close at once).
CLOSE_CONNECTIONS_S = 5


def head_limits(config: GatewayConfig) -> HeadLimits:
    limits = config.limits
    return HeadLimits(
        max_head_bytes=limits.max_head_bytes,
        max_headers=limits.max_headers,
        head_timeout_s=limits.head_timeout_s,
        keepalive_timeout_s=limits.keepalive_timeout_s,
        max_pipelined=limits.max_pipelined,
    )


class GatewayServer(uvicorn.Server):
    """uvicorn's server with the gateway's signal handling."""

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle) -> None:
        super().__init__(config)
        self.lifecycle = lifecycle
        lifecycle.on_drained = self._stop

    def _stop(self) -> None:
        self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self):
        loop = asyncio.get_running_loop()
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        for sig in handled:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            yield
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        if not self.started:
            if sig != signal.SIGHUP:
                self.should_exit = True  # not serving yet: nothing to drain
            return
        if sig == signal.SIGHUP:
            self.lifecycle.reload_soon("SIGHUP")
        else:
            self.lifecycle.stop(grace=sig == signal.SIGTERM)


def log_to_stderr(level: str, worker: WorkerSlot | None = None) -> None:
    """The gateway's own log lines (reloads, drains, workers, backend failures) on
    stderr beside uvicorn's, at the config's level, through the one redaction rule
    (gateway/observe/log_lines.py); the access log has its own."""
    logger = logging.getLogger("switchyard")
    for old in list(logger.handlers):  # a worker replaces its supervisor's
        logger.removeHandler(old)
    who = f" [worker {worker.index}]" if worker is not None else ""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(levelname)-9s %(name)s{who}: %(message)s"))
    guard_handler(handler)
    logger.addHandler(handler)
    if logging.lastResort is not None:  # what libraries log with no handler of their own (an exporter's warning)
        guard_handler(logging.lastResort)
    logger.setLevel(logging.DEBUG if level.lower() == "trace" else level.upper())


def run_server(config: GatewayConfig, source: ConfigSource | None = None, worker: WorkerSlot | None = None) -> None:
    log_to_stderr(config.log_level, worker)
    app = HotPath(create_app(Gateway(config, source=source, worker=worker)))
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
        timeout_graceful_shutdown=CLOSE_CONNECTIONS_S,
        proxy_headers=False,
        server_header=False,
    )
    guard("uvicorn", "uvicorn.error", "uvicorn.access")  # uvicorn's handlers exist once its config is built
    sockets = [_socket(uv, config.listen.host, worker.port) if worker else uv.bind_socket()]
    if config.ops.listen is not None:
        host, port = config.ops.listen.host, config.ops.listen.port
        if worker is not None:
            ops = _socket(uv, host, worker.ops_port or port)
        else:
            ops = uvicorn.Config(app, host=host, port=port).bind_socket()
        app.serve_ops_on(ops.getsockname()[1])
        sockets.append(ops)
    # What was built so far (modules, config, the app) lives as long as the process: out
    # of the collector's sight, a full collection no longer walks it on the request path.
    # Startup's garbage is collected first, not frozen with it.
    gc.collect()
    gc.freeze()
    GatewayServer(uv, app.gateway.lifecycle).run(sockets=sockets)


def _socket(uv: uvicorn.Config, host: str, port: int) -> socket.socket:
    return listening_socket(host, port, uv.backlog)
