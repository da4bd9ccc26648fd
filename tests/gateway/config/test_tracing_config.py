"""Which tracing a gateway runs: the config's `tracing:` section over the standard
OTEL_* environment, refusals that name what to fix, and a gateway that runs (tracing
off, OpenTelemetry never imported) without the `otel` extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from gateway.config.schema import ConfigError, parse_config
from gateway.config.tracing import TracingConfig, resolve, traces_url
from gateway.observe.context import NO_TRACE, current_trace
from gateway.observe.otel_trace import OtelTracing
from gateway.observe.tracing import NoTracing, build_tracing
from processes import free_port
from tests.procs import ROOT

COLLECTOR = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}


def test_off_unless_the_config_or_the_environment_turns_it_on():
    assert not resolve(TracingConfig(), {}).enabled
    assert resolve(TracingConfig(), COLLECTOR).enabled
    assert resolve(TracingConfig(), {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}).enabled
    assert not resolve(TracingConfig(), {**COLLECTOR, "OTEL_SDK_DISABLED": "true"}).enabled
    assert not resolve(TracingConfig(), {**COLLECTOR, "OTEL_TRACES_EXPORTER": "none"}).enabled
    assert not resolve(TracingConfig(enabled=False), COLLECTOR).enabled
    assert resolve(TracingConfig(enabled=True), {}).enabled
    assert resolve(TracingConfig(enabled=True), {"OTEL_TRACES_EXPORTER": "none"}).enabled
    # The SDK's own off switch wins over the config.
    assert not resolve(TracingConfig(enabled=True), {"OTEL_SDK_DISABLED": "TRUE"}).enabled


def test_config_settings_win_and_the_environment_fills_the_rest():
    env = {**COLLECTOR, "OTEL_SERVICE_NAME": "edge-gw"}
    from_env = resolve(TracingConfig(), env)
    # Left to the SDK, which reads the same variables.
    assert from_env.endpoint is None and from_env.service_name is None and from_env.sample_ratio is None
    assert resolve(TracingConfig(), COLLECTOR).service_name == "switchyard"
    attrs = {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,team=llm"}
    assert resolve(TracingConfig(), attrs).service_name is None
    configured = resolve(
        TracingConfig(
            enabled=True, endpoint="http://otel:4318/", sample_ratio=0.25, service_name="gw", headers={"a": "b"}
        ),
        env,
    )
    assert configured.endpoint == "http://otel:4318/v1/traces"
    assert (configured.sample_ratio, configured.service_name, configured.headers) == (0.25, "gw", {"a": "b"})


def test_the_endpoint_is_a_base_address_or_already_the_traces_url():
    assert traces_url("http://otel:4318") == "http://otel:4318/v1/traces"
    assert traces_url("https://otel.example/v1/traces") == "https://otel.example/v1/traces"
    assert traces_url("http://otel:4318/prefix/") == "http://otel:4318/prefix/v1/traces"


def test_an_otlp_protocol_other_than_http_protobuf_is_refused_by_name():
    for env in ({**COLLECTOR, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}):
        with pytest.raises(ConfigError, match="'grpc': this gateway exports OTLP over http/protobuf only.*4318"):
            build_tracing(TracingConfig(enabled=True), env)
    with pytest.raises(ConfigError, match="protocol"):
        parse_config({"tracing": {"protocol": "grpc"}})
    with pytest.raises(ConfigError, match="sample_ratio"):
        parse_config({"tracing": {"sample_ratio": 2}})


def scope(headers=None) -> dict:
    return {"headers": headers or [], "method": "POST", "path": "/v1/completions", "scheme": "http"}


def test_build_tracing_gives_the_no_op_when_off_and_an_exporter_when_on():
    off = build_tracing(TracingConfig(), {})
    assert isinstance(off, NoTracing) and off.request(scope(), "chat") is NO_TRACE
    on = build_tracing(TracingConfig(enabled=True, endpoint="http://127.0.0.1:9", sample_ratio=0.5), {})
    try:
        assert isinstance(on, OtelTracing)
        assert on.provider.resource.attributes["service.name"] == "switchyard"
        assert "TraceIdRatioBased{0.5}" in on.provider.sampler.get_description()
        trace = on.request(scope([(b"traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")]), "text_completion")
        assert current_trace() is trace
        assert trace.span.get_span_context().trace_id == int("1" * 32, 16)
    finally:
        on.provider.shutdown()
    # Tracing off again in the same task: the earlier request's trace is not lent out.
    assert off.request(scope(), "chat") is NO_TRACE and current_trace() is NO_TRACE


def test_build_tracing_reads_the_process_environment_when_given_none(monkeypatch):
    # The SDK's off switch in the gateway's own environment wins over a config turning tracing on.
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert isinstance(build_tracing(TracingConfig(enabled=True)), NoTracing)
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ConfigError, match="'grpc'"):
        build_tracing(TracingConfig(enabled=True))


def test_the_gateway_runs_without_the_otel_extra():
    """The extra's packages (the SDK, the exporter) made unimportable: a config without
    tracing builds and serves a request's hooks; one that turns tracing on is refused,
    saying what to install. (opentelemetry-api stays: FastAPI itself depends on it.)"""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry.sdk"] = None  # as if not installed
        sys.modules["opentelemetry.exporter"] = None
        from gateway.app import Gateway
        from gateway.config.schema import ConfigError, parse_config
        from gateway.observe.tracing import build_tracing
        from gateway.observe.context import NO_TRACE
        from gateway.config.tracing import TracingConfig

        models = {"m": {"backends": [{"name": "b", "adapter": "openai", "url": "http://127.0.0.1:9/v1"}]}}
        gateway = Gateway(parse_config({"models": models}))
        scope = {"headers": [], "method": "POST", "path": "/v1/chat/completions"}
        assert gateway.tracing.request(scope, "chat") is NO_TRACE
        assert "gateway.observe.otel_trace" not in sys.modules
        try:
            parse_config({"models": models, "tracing": {"enabled": True}})
        except ConfigError as exc:
            print("config:", exc)
        try:
            build_tracing(TracingConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
        except ConfigError as exc:
            print("env:", exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    config_refusal, env_refusal = done.stdout.split("env: ")
    assert config_refusal.startswith("config: ") and "tracing: tracing needs the otel extra" in config_refusal
    for refusal in (config_refusal, env_refusal):
        assert "pip install '.[otel]'" in refusal, refusal


async def test_a_dead_collector_holds_the_stop_no_longer_than_the_export_cap():
    dead = f"http://127.0.0.1:{free_port()}"
    tracing = build_tracing(TracingConfig(enabled=True, endpoint=dead), {})
    assert isinstance(tracing, OtelTracing) and tracing.exporter is not None
    trace = tracing.request({"headers": [], "method": "POST", "path": "/v1/chat/completions"}, "chat")
    trace.span.end()  # one span waiting for export: the shutdown must try to send it
    started = time.monotonic()
    await tracing.aclose(export_s=0.2)
    # The exporter was cut off: its retries (10 s by default) did not run their course.
    # 8 s is far above the cap and still below the exporter's own 10 s, so a busy
    # machine cannot fail this and the old uncapped close cannot pass it.
    assert tracing.exporter._shutdown  # type: ignore[attr-defined]
    assert time.monotonic() - started < 8
