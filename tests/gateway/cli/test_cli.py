"""The `switchyard` command with only the base dependencies: the optional extras'
packages (openai, httpx, numpy, matplotlib, torch) made unimportable in a child
process, as in a base `pip install .`. `--help`, `serve` and `config check` work and
import none of them; a command that needs an extra names it, in one line, exit 2."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.blocked_imports import cli_without
from tests.procs import ROOT

OPTIONAL = ("openai", "httpx", "numpy", "matplotlib", "torch")


def switchyard_base_only(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_without(OPTIONAL, *argv, watched=("conformance", "bench", "uvicorn")),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def imported(done: subprocess.CompletedProcess[str]) -> list[str]:
    line = next(line for line in done.stdout.splitlines() if line.startswith("IMPORTED "))
    return json.loads(line.removeprefix("IMPORTED "))


def test_help_lists_every_command_without_importing_them():
    done = switchyard_base_only("--help")
    assert done.returncode == 0, done.stderr
    for command in ("serve", "config", "keys", "engine", "simulate", "conformance", "bench"):
        assert command in done.stdout
    assert imported(done) == []


def test_config_check_needs_no_extra_and_imports_none(tmp_path):
    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump({"models": {"m": {"backends": [{"name": "v", "adapter": "vllm", "url": "http://v:8000"}]}}})
    )
    done = switchyard_base_only("config", "check", str(config))
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout
    assert imported(done) == []  # nor the server: checking a config starts nothing


def test_config_check_names_the_engine_extra_for_a_native_backend(tmp_path):
    config = tmp_path / "native.yaml"
    config.write_text(
        yaml.safe_dump(
            {"models": {"m": {"backends": [{"name": "n", "adapter": "native", "model_path": "builtin:tiny"}]}}}
        )
    )
    done = switchyard_base_only("config", "check", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "pip install '.[engine]'" in done.stderr


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["conformance", "run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--report", "r"], "conformance"),
        (["conformance", "diff", "a.json", "b.json"], "conformance"),
        (["bench", "run", "--base-url", "http://127.0.0.1:9", "--model", "m"], "bench"),
        (["engine", "make-tiny", "out"], "engine"),
    ],
    ids=["conformance-run", "conformance-diff", "bench-run", "engine-make-tiny"],
)
def test_a_command_without_its_extra_says_what_to_install(argv, extra):
    done = switchyard_base_only(*argv)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install '.[{extra}]'" in lines[0], done.stderr
    assert lines[0].startswith(f"switchyard {argv[0]} needs the `{extra}` extra")


def test_an_unknown_command_is_argparses_usage_error():
    done = switchyard_base_only("serv")
    assert done.returncode == 2 and "invalid choice: 'serv'" in done.stderr


def test_commands_run_one_after_another_in_one_process(tmp_path, capsys):
    # each call builds its own parser: a group registered by an earlier call must not leak into it
    from gateway.cli.main import main

    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump({"models": {"m": {"backends": [{"name": "v", "adapter": "vllm", "url": "http://v:8000"}]}}})
    )
    for _ in range(2):
        assert main(["engine", "serve", "--model", str(tmp_path / "missing")]) == 2
        assert main(["config", "check", str(config)]) == 0
        assert main(["serve", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "Traceback" not in capsys.readouterr().err
