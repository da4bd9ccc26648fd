"""The gateway's own subcommands (gateway/cli/commands.py) in process, with the server and
the supervisor stood in for: the config each command would serve and where it came from,
`config check`'s line, a refusal (its message, exit 2), one process or a supervisor of
workers and a listen address it cannot have, and the command line's checks."""

from __future__ import annotations

import argparse
import logging
import types

import pytest
import yaml

from gateway.cli import commands
from gateway.cli.commands import embedded_config, servable_config
from gateway.cli.main import build_parser, main
from gateway.config.schema import ConfigError, parse_config
from gateway.lifecycle.reload import ConfigSource

VLLM = {"adapter": "vllm", "url": "http://v:8000"}


def fleet(tmp_path, **extra) -> str:
    path = tmp_path / "fleet.yaml"
    backends = [{"name": "a", **VLLM}, {"name": "b", **VLLM}]
    path.write_text(
        yaml.safe_dump({"models": {"m": {"backends": backends}, "n": {"backends": [{"name": "c", **VLLM}]}}, **extra})
    )
    return str(path)


@pytest.fixture()
def served(monkeypatch):
    """serve_config stood in for: what each command would serve, and from where."""
    seen: list[tuple] = []
    monkeypatch.setattr(commands, "serve_config", lambda config, source: seen.append((config, source)) or 5)
    return seen


def model_dir(tmp_path, name: str):
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path


def test_the_embedded_config_is_the_native_engine_on_the_tiny_model(tmp_path):
    config = embedded_config()
    (backend,) = config.models["tiny"].backends
    assert (backend.name, backend.adapter, backend.model_path, backend.served_model) == (
        "local",
        "native",
        "builtin:tiny",
        None,
    )
    x = str(model_dir(tmp_path, "x"))
    other = embedded_config(x, "x", "x-served").models["x"].backends[0]
    assert (other.model_path, other.served_model) == (x, "x-served")


def test_config_check_says_what_it_validated(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    path = fleet(tmp_path)
    assert main(["config", "check", path]) == 0
    assert capsys.readouterr().out == f"{path}: OK — 2 model(s), 3 backend(s), auth none, quota store memory\n"
    assert main(["config", "check", str(tmp_path / "missing.yaml")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "missing.yaml" in err and "Traceback" not in err


def test_the_environment_is_checked_before_a_config_is_served(tmp_path, monkeypatch, capsys, served):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ConfigError, match="^tracing: OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc'"):
        servable_config(fleet(tmp_path))
    assert main(["serve", "--config", fleet(tmp_path)]) == 2 and served == []
    assert capsys.readouterr().err.startswith("tracing: OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc'")


def test_serve_takes_the_file_and_the_command_lines_overrides(tmp_path, served, monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    path = fleet(tmp_path)
    assert main(["serve", "--config", path, "--host", "127.0.0.2", "--port", "9001", "--workers", "3"]) == 5
    ((config, source),) = served
    assert (config.listen.host, config.listen.port, config.workers) == ("127.0.0.2", 9001, 3)
    assert source == ConfigSource(path, "127.0.0.2", 9001, 3)
    assert main(["serve", "--port", "9002"]) == 5  # no file: the built-in model
    config, source = served[-1]
    assert (
        list(config.models) == ["tiny"]
        and config.listen.port == 9002
        and source == ConfigSource(None, None, 9002, None)
    )
    assert servable_config(None, workers=2).workers == 2 and servable_config(None).listen.port == 8080


def test_engine_serve_names_the_model_after_its_directory(tmp_path, served, capsys):
    path = str(model_dir(tmp_path, "qwen-7b")) + "/"
    assert main(["engine", "serve", "--model", path, "--port", "9003"]) == 5
    config, source = served[-1]
    backend = config.models["qwen-7b"].backends[0]
    assert (backend.model_path, backend.served_model, config.listen.port) == (path, "qwen-7b", 9003)
    assert source == ConfigSource(None)
    assert main(["engine", "serve", "--model", "builtin:tiny", "--name", "t", "--host", "127.0.0.3"]) == 5
    config, _ = served[-1]
    assert list(config.models) == ["t"] and config.listen.host == "127.0.0.3"
    assert main(["engine", "serve", "--model", "builtin:tiny", "--host", "0.0.0.0"]) == 2  # no auth off loopback
    assert "Traceback" not in capsys.readouterr().err and len(served) == 2


def test_one_process_or_a_supervisor_of_workers(monkeypatch, caplog, capsys):
    import gateway.http.server as server
    import gateway.lifecycle.workers as workers

    ran: list[tuple] = []
    monkeypatch.setattr(server, "run_server", lambda config, source, slot=None: ran.append((config, source, slot)))
    monkeypatch.setattr(server, "log_to_stderr", lambda level: ran.append(("log", level)))
    one = parse_config({"models": {"m": {"backends": [{"name": "a", **VLLM}]}}})
    assert commands.serve_config(one, ConfigSource(None)) == 0 and ran == [(one, ConfigSource(None), None)]

    made: list[tuple] = []

    class Supervisor:
        def __init__(self, count, run_worker, listen, ops) -> None:
            made.append((count, listen, ops))
            self.run_worker = run_worker

        def run(self) -> int:
            return 7 if self.run_worker("slot") == 0 else 9

    monkeypatch.setattr(workers, "Supervisor", Supervisor)
    ran.clear()
    many = parse_config(
        {"models": {"m": {"backends": [{"name": "a", **VLLM}]}}, "workers": 3, "listen": {"port": 9004}}
    )
    with caplog.at_level(logging.WARNING, "switchyard.workers"):
        assert commands.serve_config(many, ConfigSource("f")) == 7
    assert made == [(3, ("127.0.0.1", 9004), None)]
    assert ran == [("log", many.log_level), (many, ConfigSource("f"), "slot")]
    assert all(r.name == "switchyard.workers" for r in caplog.records)
    with_ops = parse_config(
        {"models": {"m": {"backends": [{"name": "a", **VLLM}]}}, "workers": 2, "ops": {"listen": {"port": 9005}}}
    )
    commands.serve_config(with_ops, ConfigSource(None))
    assert made[-1][2] == (with_ops.ops.listen.host, 9005)

    class Taken(Supervisor):
        def __init__(self, *args) -> None:
            raise OSError(98, "Address already in use")

    monkeypatch.setattr(workers, "Supervisor", Taken)
    assert commands.serve_config(many, ConfigSource(None)) == 1
    assert capsys.readouterr().err == "cannot listen on 127.0.0.1:9004: Address already in use\n"


def test_the_workers_count_is_at_least_one():
    parser = build_parser(["serve"])
    assert parser.parse_args(["serve", "--workers", "1"]).workers == 1
    with pytest.raises(argparse.ArgumentTypeError, match="^must be at least 1, not 0$"):
        commands._positive("0")
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--workers", "0"])
    args = parser.parse_args(["serve"])
    assert (args.config, args.host, args.port, args.workers, args.func) == (None, None, None, None, commands.cmd_serve)
    check = parser.parse_args(["config", "check", "f.yaml"])
    assert (check.file, check.func, check.config_command) == ("f.yaml", commands.cmd_config_check, "check")
    engine = parser.parse_args(["engine", "serve", "--model", "m"])
    assert (engine.name, engine.host, engine.port, engine.func) == (None, None, None, commands.cmd_engine_serve)
    with pytest.raises(SystemExit):
        parser.parse_args(["engine", "serve"])  # --model is required


def test_each_commands_help_to_the_word():
    def text(parser) -> str:
        return " ".join(parser.format_help().split())

    def sub(parser, name: str):
        return parser._subparsers._group_actions[0].choices[name]

    top = build_parser(["serve"])
    assert (
        "serve run the gateway (no --config: the native engine on the built-in tiny model) config config tools keys"
        in text(top)
    )
    assert text(sub(top, "serve")).endswith(
        "--config CONFIG YAML config file --host HOST listen address (default 127.0.0.1 or the config's)"
        " --port PORT listen port (default 8080 or the config's)"
        " --workers WORKERS worker processes on the one port (default 1 or the config's `workers`)"
    )
    assert "{check} check validate a config file and say what is wrong options:" in text(sub(top, "config"))
    assert "the OpenAI API options:" in text(sub(top, "engine"))
    assert "serve serve one model directory behind the OpenAI API options:" in text(sub(top, "engine"))
    assert text(sub(sub(top, "engine"), "serve")).endswith(
        "--model MODEL a Hugging Face model directory, or builtin:tiny"
        " --name NAME served model name (default: the directory's name) --host HOST --port PORT"
    )
    engine = top.parse_args(["engine", "serve", "--model", "m", "--port", "9003"])
    assert engine.port == 9003 and isinstance(engine.port, int)
    with pytest.raises(SystemExit):
        top.parse_args(["config"])  # check is required


def test_the_engine_group_is_made_here_when_the_engine_made_none(monkeypatch):
    import engine.cli

    monkeypatch.setattr(engine.cli, "ENGINE_SUBPARSERS", None)
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    group = commands._group(sub, "engine", "ENGINE_SUBPARSERS", "engine.cli", "the native engine")
    assert "engine" in sub.choices and "the native engine" in parser.format_help()
    group.add_parser("x")
    with pytest.raises(SystemExit):
        parser.parse_args(["engine"])  # a subcommand is required
    assert parser.parse_args(["engine", "x"]).engine_command == "x"
    missing = commands._group(sub, "other", "X", "no_such_module_of_a_test", "another group")
    assert missing is not group and "other" in sub.choices


def test_a_refused_engine_config_and_the_workers_warnings(tmp_path, capsys, monkeypatch, caplog):
    assert main(["engine", "serve", "--model", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.startswith("the engine's config is not valid")
    assert servable_config(None, host="127.0.0.2").listen.host == "127.0.0.2"
    import gateway.http.server as server
    import gateway.lifecycle.workers as workers

    monkeypatch.setattr(server, "log_to_stderr", lambda level: None)

    class Supervisor:
        def __init__(self, *args) -> None:
            pass

        def run(self) -> int:
            return 0

    monkeypatch.setattr(workers, "Supervisor", Supervisor)
    many = parse_config({"models": {"m": {"backends": [{"name": "a", **VLLM}]}}, "workers": 2})
    with caplog.at_level(logging.WARNING, "switchyard.workers"):
        commands.serve_config(many, ConfigSource(None))
    assert caplog.messages and caplog.messages[0].startswith("2 workers, and the Responses API's store is in memory")


def test_no_store_warning_when_the_quota_store_is_shared(monkeypatch, caplog):
    import gateway.http.server as server
    import gateway.lifecycle.workers as workers

    monkeypatch.setattr(server, "log_to_stderr", lambda level: None)
    monkeypatch.setattr(workers, "Supervisor", lambda *args: types.SimpleNamespace(run=lambda: 0))
    shared = parse_config(
        {
            "models": {"m": {"backends": [{"name": "a", **VLLM}]}},
            "workers": 2,
            "quota_store": {"kind": "redis", "url": "redis://127.0.0.1:6379"},
        }
    )
    with caplog.at_level(logging.WARNING, "switchyard.workers"):
        assert commands.serve_config(shared, ConfigSource(None)) == 0
    assert not any("Responses API's store" in m for m in caplog.messages)
