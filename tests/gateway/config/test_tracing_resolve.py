"""The tracing settings a gateway resolves from its config and the OTEL_* environment
(gateway/config/tracing.py), each rule at its edges: the off switches read loosely (case,
spaces), which problems are reported and with what prefix, the service name's fallbacks,
the traces URL, and what a gateway without the `otel` extra says."""

from __future__ import annotations

import importlib.util

import pytest

from gateway.config import tracing
from gateway.config.schema import ConfigError, parse_config
from gateway.config.tracing import MISSING_EXTRA, TracingConfig, TracingSettings, otel_installed, resolve, traces_url

COLLECTOR = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}


def test_the_off_switches_are_read_without_case_or_spaces():
    assert resolve(TracingConfig(enabled=True), {"OTEL_SDK_DISABLED": " True "}).enabled is False
    assert resolve(TracingConfig(enabled=True), {"OTEL_SDK_DISABLED": "false"}).enabled
    assert not resolve(TracingConfig(), {**COLLECTOR, "OTEL_TRACES_EXPORTER": " NONE "}).enabled
    assert resolve(TracingConfig(), {**COLLECTOR, "OTEL_TRACES_EXPORTER": "otlp"}).enabled
    assert not resolve(TracingConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": ""}).enabled  # empty: not named


def test_the_whole_settings_of_a_gateway_that_traces_by_its_environment():
    env = {**COLLECTOR, "OTEL_EXPORTER_OTLP_TIMEOUT": "5"}
    assert resolve(TracingConfig(), env) == TracingSettings(
        enabled=True, endpoint=None, sample_ratio=None, service_name="switchyard", headers=None, problem=None
    )


def test_a_problem_of_the_environment_is_reported_only_when_tracing_is_on():
    bad = {**COLLECTOR, "OTEL_EXPORTER_OTLP_TIMEOUT": "-1"}
    on = resolve(TracingConfig(), bad)
    assert on.problem == "tracing: OTEL_EXPORTER_OTLP_TIMEOUT is '-1': it must be a positive number of seconds"
    assert resolve(TracingConfig(enabled=False), bad).problem is None
    # the config's own endpoint and ratio override the variables they would be read from
    wrong = {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318", "OTEL_TRACES_SAMPLER": "sometimes"}
    assert resolve(TracingConfig(enabled=True, endpoint="http://c:4318", sample_ratio=0.5), wrong).problem is None
    assert resolve(TracingConfig(enabled=True, endpoint="http://c:4318"), wrong).problem.startswith(
        "tracing: OTEL_TRACES_SAMPLER is 'sometimes'"
    )
    assert resolve(TracingConfig(enabled=True, sample_ratio=0.5), wrong).problem.startswith(
        "tracing: OTEL_EXPORTER_OTLP_ENDPOINT is 'collector:4318'"
    )
    grpc = resolve(TracingConfig(enabled=True), {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert grpc.problem.startswith("tracing: OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc'")
    assert resolve(TracingConfig(enabled=True, protocol="http/protobuf"), {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == (
        TracingSettings(True, None, None, "switchyard", None, None)
    )


def test_without_the_extra_a_gateway_that_would_trace_says_what_to_install(monkeypatch):
    monkeypatch.setattr(tracing, "otel_installed", lambda: False)
    assert resolve(TracingConfig(), COLLECTOR).problem == MISSING_EXTRA
    assert resolve(TracingConfig(), {}).problem is None  # off: nothing to install
    assert resolve(TracingConfig(), {**COLLECTOR, "OTEL_EXPORTER_OTLP_TIMEOUT": "0"}).problem.startswith(
        "tracing: OTEL_EXPORTER_OTLP_TIMEOUT"
    )  # the environment's problem first
    assert MISSING_EXTRA.startswith("tracing needs the otel extra (") and MISSING_EXTRA.endswith(
        "): opentelemetry-sdk is not installed"
    )
    with pytest.raises(ValueError, match="tracing needs the otel extra"):
        TracingConfig(enabled=True)
    assert TracingConfig(enabled=False).enabled is False and TracingConfig().enabled is None
    with pytest.raises(ConfigError, match="tracing needs the otel extra"):
        parse_config({"tracing": {"enabled": True}})


def test_otel_is_installed_when_its_sdk_can_be_found(monkeypatch):
    assert otel_installed() is True
    asked: list[str] = []

    def find_spec(name: str):
        asked.append(name)
        if name == "opentelemetry.sdk":
            raise ModuleNotFoundError("No module named 'opentelemetry'")
        return None

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert otel_installed() is False and asked == ["opentelemetry.sdk"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert otel_installed() is False


def test_the_service_names_fallbacks():
    assert resolve(TracingConfig(), {"OTEL_SERVICE_NAME": ""}).service_name == "switchyard"  # empty: not named
    assert resolve(TracingConfig(), {"OTEL_SERVICE_NAME": "edge"}).service_name is None  # the SDK reads it
    assert resolve(TracingConfig(service_name="gw"), {"OTEL_SERVICE_NAME": "edge"}).service_name == "gw"
    attrs = {"OTEL_RESOURCE_ATTRIBUTES": "team=llm,service.name=x"}
    assert resolve(TracingConfig(), attrs).service_name is None
    other = {"OTEL_RESOURCE_ATTRIBUTES": "team=llm,service.namespace=x"}
    assert resolve(TracingConfig(), other).service_name == "switchyard"


def test_the_traces_url_strips_every_trailing_slash_once():
    assert traces_url("http://otel:4318//") == "http://otel:4318/v1/traces"
    assert traces_url("http://otel:4318/v1/traces/") == "http://otel:4318/v1/traces"
    assert traces_url("http://otel:4318/X/") == "http://otel:4318/X/v1/traces"  # only slashes go
    assert traces_url("http://otel:4318/v1/tracesx") == "http://otel:4318/v1/tracesx/v1/traces"
    assert resolve(TracingConfig(endpoint="http://otel:4318/"), {}).endpoint == "http://otel:4318/v1/traces"
