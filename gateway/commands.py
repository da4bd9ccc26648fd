"""The gateway's own subcommands: `serve`, `config check` and `engine serve`
(the last hangs under the engine's group)."""

from __future__ import annotations

import argparse
import sys

from gateway.config import BackendConfig, ConfigError, GatewayConfig, ModelConfig, load_config, parse_config

BUILTIN_MODEL = "tiny"


def embedded_config(model_path: str = "builtin:tiny", name: str = BUILTIN_MODEL) -> GatewayConfig:
    """No config file: the gateway with the native engine on the built-in tiny model,
    no auth (it listens on 127.0.0.1 unless told otherwise)."""
    backend = BackendConfig(name="local", adapter="native", model_path=model_path)
    return GatewayConfig(models={name: ModelConfig(backends=[backend])})


def serve_config(config: GatewayConfig, host: str | None, port: int | None, workers: int = 1) -> int:
    from gateway.server import run_server

    try:
        config = with_listen(config, host, port)
        run_server(config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


def with_listen(config: GatewayConfig, host: str | None, port: int | None) -> GatewayConfig:
    """`config` listening where the command line says, validated again: a rule may
    depend on the address (auth and the ops views on a non-loopback one)."""
    if not host and port is None:
        return config
    data = config.model_dump(exclude_unset=True)
    data["listen"] = {**data.get("listen", {}), **({"host": host} if host else {})}
    if port is not None:
        data["listen"]["port"] = port
    return parse_config(data, "the config with --host/--port applied")


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config) if args.config else embedded_config()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    return serve_config(config, args.host, args.port)


def cmd_config_check(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    backends = sum(len(m.backends) for m in config.models.values())
    print(
        f"{args.file}: OK — {len(config.models)} model(s), {backends} backend(s), auth {config.auth.mode}, "
        f"quota store {config.quota_store.kind}"
    )
    return 0


def cmd_engine_serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    name = args.name or Path(args.model.rstrip("/")).name
    config = embedded_config(model_path=args.model, name=name)
    config.models[name].backends[0].served_model = name
    return serve_config(config, args.host, args.port)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the gateway (no --config: the native engine on the built-in tiny model)")
    p.add_argument("--config", help="YAML config file")
    p.add_argument("--host", help="listen address (default 127.0.0.1 or the config's)")
    p.add_argument("--port", type=int, help="listen port (default 8080 or the config's)")
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
