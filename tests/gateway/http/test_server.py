"""gateway/http/server.py in process: the head limits taken from the config, the signals
(before serving and while serving), the gateway's log handler on stderr, and what
`run_server` hands uvicorn (its settings and the sockets it binds; the server's run is
stood in for here, the e2e tests serve it in a process)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal

import pytest

from gateway.config.schema import parse_config
from gateway.http import server
from gateway.http.limits import HeadLimits
from gateway.lifecycle.reload import ConfigSource
from gateway.lifecycle.workers import WorkerSlot
from gateway.observe.log_lines import SafeLines
from processes import free_port

MODELS = {"m": {"backends": [{"name": "b", "adapter": "openai", "url": "http://127.0.0.1:9/v1"}]}}


def test_head_limits_are_the_configs_own():
    config = parse_config(
        {
            "models": MODELS,
            "limits": {
                "max_head_bytes": 2048,
                "max_headers": 9,
                "head_timeout_s": 1.5,
                "keepalive_timeout_s": 2.5,
                "max_pipelined": 3,
            },
        }
    )
    assert server.head_limits(config) == HeadLimits(
        max_head_bytes=2048, max_headers=9, head_timeout_s=1.5, keepalive_timeout_s=2.5, max_pipelined=3
    )


class Lifecycle:
    """What the server tells the gateway's lifecycle."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.on_drained = None

    def reload_soon(self, why: str) -> None:
        self.calls.append(("reload", why))

    def stop(self, grace: bool) -> None:
        self.calls.append(("stop", grace))


def gateway_server() -> tuple[server.GatewayServer, Lifecycle]:
    import uvicorn

    lifecycle = Lifecycle()
    return server.GatewayServer(uvicorn.Config(app=None), lifecycle), lifecycle  # type: ignore[arg-type]


def test_before_serving_a_stop_signal_exits_and_a_reload_is_ignored():
    for sig, exits in ((signal.SIGTERM, True), (signal.SIGINT, True), (signal.SIGHUP, False)):
        srv, lifecycle = gateway_server()
        srv.started = False
        srv._on_signal(sig)
        assert srv.should_exit is exits and lifecycle.calls == []


def test_while_serving_sigterm_drains_sigint_drains_without_grace_and_sighup_reloads():
    srv, lifecycle = gateway_server()
    srv.started = True
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        srv._on_signal(sig)
    assert lifecycle.calls == [("stop", True), ("stop", False), ("reload", "SIGHUP")]
    assert not srv.should_exit
    lifecycle.on_drained()  # the drain over: the server is told to stop
    assert srv.should_exit


async def test_the_signals_are_the_servers_while_it_runs_and_given_back_after():
    srv, lifecycle = gateway_server()
    srv.started = True
    with srv.capture_signals():
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(100):
            if lifecycle.calls:
                break
            await asyncio.sleep(0.01)
        assert lifecycle.calls == [("reload", "SIGHUP")]
    for sig in (signal.SIGTERM, signal.SIGHUP):
        assert signal.getsignal(sig) is signal.SIG_DFL


@pytest.fixture
def switchyard_logger():
    logger = logging.getLogger("switchyard")
    handlers, level = list(logger.handlers), logger.level
    last_filters = list(logging.lastResort.filters) if logging.lastResort else []
    yield logger
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    for handler in handlers:
        logger.addHandler(handler)
    logger.setLevel(level)
    if logging.lastResort is not None:
        logging.lastResort.filters[:] = last_filters


def test_the_gateways_log_goes_to_stderr_through_the_redaction_rule(switchyard_logger, capsys):
    old = logging.NullHandler()
    switchyard_logger.addHandler(old)
    server.log_to_stderr("warning", WorkerSlot(index=2, count=3, supervisor_pid=1, run_dir="/tmp", port=1))
    assert old not in switchyard_logger.handlers and len(switchyard_logger.handlers) == 1
    (handler,) = switchyard_logger.handlers
    assert [type(f) for f in handler.filters] == [SafeLines]
    assert any(isinstance(f, SafeLines) for f in logging.lastResort.filters)
    assert switchyard_logger.level == logging.WARNING
    logging.getLogger("switchyard.test").info("not shown")
    logging.getLogger("switchyard.test").warning("reload failed password=pw")
    assert capsys.readouterr().err == "WARNING   switchyard.test [worker 2]: reload failed password=***\n"


@pytest.mark.parametrize(
    ("level", "shown"), [("trace", logging.DEBUG), ("debug", logging.DEBUG), ("Info", logging.INFO)]
)
def test_the_log_level_is_the_configs_and_trace_is_debug(switchyard_logger, capsys, level, shown):
    server.log_to_stderr(level)
    assert switchyard_logger.level == shown
    switchyard_logger.error("x")
    assert capsys.readouterr().err == "ERROR     switchyard: x\n"


@pytest.fixture
def served(monkeypatch, switchyard_logger):
    """run_server up to the server's run: (uvicorn's config, the sockets, the lifecycle)."""
    ran: list = []

    def run(self, sockets=None):
        ran.append((self.config, sockets, self.lifecycle))

    monkeypatch.setattr(server.GatewayServer, "run", run)
    monkeypatch.setattr(gc, "freeze", lambda: ran.append("frozen"))
    yield ran
    for item in ran:
        if isinstance(item, tuple):
            for sock in item[1]:
                sock.close()


def test_run_server_hands_uvicorn_the_gateways_settings_and_its_listener(served):
    port = free_port()
    limits = {"keepalive_timeout_s": 7.9, "max_headers": 12}
    server.run_server(parse_config({"models": MODELS, "listen": {"port": port}, "limits": limits, "log_level": "INFO"}))
    assert served[0] == "frozen"  # the startup's objects frozen before serving
    uv, sockets, lifecycle = served[1]
    assert (uv.host, uv.port, uv.log_level, uv.access_log, uv.ws, uv.loop) == (
        "127.0.0.1",
        port,
        "info",
        False,
        "none",
        "uvloop",
    )
    assert uv.timeout_keep_alive == 7 and uv.timeout_graceful_shutdown == server.CLOSE_CONNECTIONS_S == 5
    assert (uv.proxy_headers, uv.server_header) == (False, False)
    assert uv.http.limits == HeadLimits(max_headers=12, keepalive_timeout_s=7.9)
    assert uv.app.ops_port is None and lifecycle is uv.app.gateway.lifecycle
    assert [s.getsockname()[1] for s in sockets] == [port]
    # uvicorn's own handlers (made by its config) pass the redaction rule too.
    for name in ("uvicorn",):  # uvicorn.error and uvicorn.access have none with access_log off
        handlers = logging.getLogger(name).handlers
        assert handlers and all(any(isinstance(f, SafeLines) for f in h.filters) for h in handlers)


def test_run_server_binds_the_ops_listener_and_routes_it(served):
    port, ops = free_port(), free_port()
    listen = {"listen": {"host": "127.0.0.2", "port": port}, "ops": {"listen": {"host": "127.0.0.3", "port": ops}}}
    source = ConfigSource("/etc/switchyard.yaml")
    server.run_server(parse_config({"models": MODELS, **listen}), source=source)
    uv, sockets, _ = served[1]
    assert [s.getsockname() for s in sockets] == [("127.0.0.2", port), ("127.0.0.3", ops)]
    assert uv.app.gateway.reloader.source is source
    assert uv.app.ops_port == ops


def test_a_worker_listens_on_its_slots_ports_shared_with_its_siblings(served, tmp_path):
    port, ops = free_port(), free_port()
    slot = WorkerSlot(index=0, count=2, supervisor_pid=os.getpid(), run_dir=str(tmp_path), port=port, ops_port=ops)
    config = parse_config({"models": MODELS, "listen": {"port": 1}, "ops": {"listen": {"port": 2}}})
    server.run_server(config, worker=slot)
    uv, sockets, _ = served[1]
    assert [s.getsockname()[1] for s in sockets] == [port, ops]
    assert uv.app.gateway.worker_metrics.slot is slot  # the gateway knows its place among the workers
    (handler,) = logging.getLogger("switchyard").handlers
    assert "[worker 0]" in handler.formatter._fmt
    for sock in sockets:  # SO_REUSEPORT: a sibling binds the same port
        assert sock.getsockopt(__import__("socket").SOL_SOCKET, __import__("socket").SO_REUSEPORT) == 1
