"""The gateway's own subcommands: `serve`, `config check` and `engine serve`
(the last hangs under the engine's group)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from gateway.config.response_store import workers_warning
from gateway.config.schema import ConfigError, GatewayConfig, parse_config, with_listen
from gateway.config.tracing import resolve
from gateway.lifecycle.reload import ConfigSource
from gateway.lifecycle.rollout import workers_warning as rollout_workers_warning

BUILTIN_MODEL = "tiny"


def embedded_config(
    model_path: str = "builtin:tiny", name: str = BUILTIN_MODEL, served_model: str | None = None
) -> GatewayConfig:
    """No config file: the gateway with the native engine on the built-in tiny model,
    no auth (it listens on 127.0.0.1 unless told otherwise)."""
    backend = {"name": "local", "adapter": "native", "model_path": model_path, "served_model": served_model}
    return parse_config({"models": {name: {"backends": [backend]}}}, "the engine's config")


def serve_config(config: GatewayConfig, source: ConfigSource) -> int:
    """Serve `config` (read from `source`, which a reload reads again): in this
    process, or in `config.workers` worker processes under a supervisor."""
    from gateway.http.server import log_to_stderr, run_server

    if config.workers == 1:
        run_server(config, source)
        return 0
    from gateway.lifecycle.workers import Supervisor

    def run_worker(slot) -> int:
        run_server(config, source, slot)
        return 0

    log_to_stderr(config.log_level)
    for warning in (
        workers_warning(config.response_store, config.quota_store.kind, config.workers),
        rollout_workers_warning(config),
    ):
        if warning:
            logging.getLogger("switchyard.workers").warning(warning)
    ops = (config.ops.listen.host, config.ops.listen.port) if config.ops.listen else None
    try:
        supervisor = Supervisor(config.workers, run_worker, (config.listen.host, config.listen.port), ops)
    except OSError as exc:
        print(f"cannot listen on {config.listen.host}:{config.listen.port}: {exc.strerror}", file=sys.stderr)
        return 1
    return supervisor.run()


def servable_config(
    path: str | None, host: str | None = None, port: int | None = None, workers: int | None = None
) -> GatewayConfig:
    """The config `serve` would run, with every check it makes before starting: the one
    validation `config check` and a reload run too, and the OTEL_* environment checked
    as strictly as the file (gateway/config/otel_env.py). Raises ConfigError."""
    if path:
        config = ConfigSource(path, host, port, workers).load()
    else:
        config = with_listen(embedded_config(), host, port, workers)
    problem = resolve(config.tracing, os.environ).problem
    if problem is not None:
        raise ConfigError(problem)
    return config


def refused(exc: ConfigError) -> int:
    """A config that cannot be served: its message, no traceback, exit status 2."""
    print(exc, file=sys.stderr)
    return 2


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        config = servable_config(args.config, args.host, args.port, args.workers)
    except ConfigError as exc:
        return refused(exc)
    return serve_config(config, ConfigSource(args.config, args.host, args.port, args.workers))


def cmd_config_check(args: argparse.Namespace) -> int:
    try:
        config = servable_config(args.file)
    except ConfigError as exc:
        return refused(exc)
    backends = sum(len(m.backends) for m in config.models.values())
    print(
        f"{args.file}: OK — {len(config.models)} model(s), {backends} backend(s), auth {config.auth.mode}, "
        f"quota store {config.quota_store.kind}"
    )
    return 0


def cmd_engine_serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    name = args.name or Path(args.model.rstrip("/")).name
    try:
        config = with_listen(embedded_config(model_path=args.model, name=name, served_model=name), args.host, args.port)
    except ConfigError as exc:
        return refused(exc)
    return serve_config(config, ConfigSource(None))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the gateway (no --config: the native engine on the built-in tiny model)")
    p.add_argument("--config", help="YAML config file")
    p.add_argument("--host", help="listen address (default 127.0.0.1 or the config's)")
    p.add_argument("--port", type=int, help="listen port (default 8080 or the config's)")
    p.add_argument(
        "--workers", type=_positive, help="worker processes on the one port (default 1 or the config's `workers`)"
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("config", help="config tools")
    config_sub = p.add_subparsers(dest="config_command", required=True)
    c = config_sub.add_parser("check", help="validate a config file and say what is wrong")
    c.add_argument("file")
    c.set_defaults(func=cmd_config_check)

    engine_sub = _group(sub, "engine", "ENGINE_SUBPARSERS", "engine.cli", "the native engine")
    e = engine_sub.add_parser("serve", help="serve one model directory behind the OpenAI API")
    e.add_argument("--model", required=True, help="a Hugging Face model directory, or builtin:tiny")
    e.add_argument("--name", help="served model name (default: the directory's name)")
    e.add_argument("--host", default=None)
    e.add_argument("--port", type=int, default=None)
    e.set_defaults(func=cmd_engine_serve)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _group(sub, name: str, attr: str, module_name: str, help_text: str):
    """The sub-subcommand group another package created, or a new one."""
    import importlib

    try:
        existing = getattr(importlib.import_module(module_name), attr, None)
    except ModuleNotFoundError:
        existing = None
    if existing is not None:
        return existing
    p = sub.add_parser(name, help=help_text)
    return p.add_subparsers(dest=f"{name}_command", required=True)
