"""The OTEL_* environment goes through the same checks as the config file, in
`serve` and in `config check` alike: a value the gateway cannot honour is a config
error (one line, exit 2), never a traceback at start nor an OK from the check."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from tests.procs import ROOT, SWITCHYARD

COLLECTOR = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
BAD_ENVIRONMENTS = [
    ({**COLLECTOR, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc'"),
    ({**COLLECTOR, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
    ({**COLLECTOR, "OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER is 'console'"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "otel-collector:4318"}, "must be an http:// or https:// URL"),
    ({**COLLECTOR, "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, "OTEL_EXPORTER_OTLP_TIMEOUT is 'soon'"),
    ({**COLLECTOR, "OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER is 'sometimes'"),
    ({**COLLECTOR, "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "a ratio from 0 to 1"),
]


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [*SWITCHYARD, *argv], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=90
    )


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "gateway.yaml"
    backend = {"name": "v", "adapter": "vllm", "url": "http://127.0.0.1:9"}
    path.write_text(yaml.safe_dump({"listen": {"port": 0}, "models": {"m": {"backends": [backend]}}}))
    return str(path)


@pytest.mark.parametrize("env, named", BAD_ENVIRONMENTS, ids=[n for _, n in BAD_ENVIRONMENTS])
def test_config_check_refuses_what_serve_cannot_honour(config_file, env, named):
    done = run(["config", "check", config_file], env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr


def test_serve_refuses_an_unsupported_protocol_as_a_config_error_not_a_crash(config_file):
    env, named = BAD_ENVIRONMENTS[0]
    done = run(["serve", "--config", config_file], env)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert [line for line in done.stderr.splitlines() if line.strip()] == [next(iter(done.stderr.splitlines()))]
    assert named in done.stderr


def test_the_environment_is_not_read_while_tracing_is_off(config_file):
    # No endpoint: tracing stays off, and a protocol it would not use is no error.
    done = run(["config", "check", config_file], {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert done.returncode == 0, done.stderr
    done = run(["config", "check", config_file], {**COLLECTOR, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    assert done.returncode == 0, done.stderr
