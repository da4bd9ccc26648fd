"""gateway/config/otel_env.py rule by rule: the protocol's precedence, each problem's
whole message, what the config's own settings stop it from reading, and the sampler
ratio and the timeouts at, below and above their bounds."""

from __future__ import annotations

import pytest

from gateway.config.otel_env import OTLP_PROTOCOL, otel_env_problem, otlp_protocol


def problem(env: dict[str, str], *, endpoint: bool = False, sampler: bool = False) -> str | None:
    return otel_env_problem(env, otlp_protocol(None, env), endpoint, sampler)


def test_the_protocol_in_force_the_config_then_traces_then_general_then_http():
    both = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
    assert otlp_protocol("http/protobuf", both) == "http/protobuf"
    assert otlp_protocol(None, both) == "grpc"
    assert otlp_protocol(None, {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}) == "http/json"
    assert otlp_protocol(None, {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": ""}) == OTLP_PROTOCOL == "http/protobuf"


def test_a_protocol_names_where_it_came_from():
    assert problem({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == (
        "OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc': this gateway exports OTLP over http/protobuf only (the "
        "collector's OTLP/HTTP receiver, port 4318); set it to http/protobuf or unset it"
    )
    traces = problem({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert traces is not None and traces.startswith("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL is 'grpc'")
    configured = otel_env_problem({}, "grpc", False, False)
    assert configured is not None and configured.startswith("tracing.protocol is 'grpc'")


def test_the_exporter():
    assert problem({"OTEL_TRACES_EXPORTER": " OTLP "}) is None
    assert problem({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert problem({"OTEL_TRACES_EXPORTER": "Zipkin"}) == (
        "OTEL_TRACES_EXPORTER is 'zipkin': this gateway exports traces over otlp (or none: off)"
    )


@pytest.mark.parametrize("name", ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"])
def test_endpoints_must_be_http_urls_unless_the_config_names_one(name):
    assert problem({name: "https://collector:4318"}) is None and problem({name: "http://collector:4318"}) is None
    for bad in ("collector:4318", "grpc://collector:4317", "http://"):
        assert problem({name: bad}) == (
            f"{name} is {bad!r}: it must be an http:// or https:// URL, e.g. http://otel-collector:4318"
        )
        assert problem({name: bad}, endpoint=True) is None


@pytest.mark.parametrize("name", ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"])
def test_a_timeout_must_be_positive(name):
    assert problem({name: "0.001"}) is None and problem({name: "10"}) is None
    for bad in ("0", "-1", "ten"):
        assert problem({name: bad}) == f"{name} is {bad!r}: it must be a positive number of seconds"


def test_the_sampler_and_its_ratio_at_below_and_above_the_bounds():
    assert problem({"OTEL_TRACES_SAMPLER": " Always_On "}) is None
    assert problem({"OTEL_TRACES_SAMPLER": "sometimes"}) == (
        "OTEL_TRACES_SAMPLER is 'sometimes': one of always_on, always_off, traceidratio, "
        "parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
    )
    for sampler in ("traceidratio", "parentbased_traceidratio"):
        for fine in ("0", "0.5", "1", "1.0"):
            assert problem({"OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": fine}) is None
        for bad in ("-0.01", "1.01", "half"):
            assert problem({"OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": bad}) == (
                f"OTEL_TRACES_SAMPLER_ARG is {bad!r}: {sampler} takes a ratio from 0 to 1"
            )
    # a ratio read by no sampler, and a sampler the config's sample_ratio overrides, are not judged
    assert problem({"OTEL_TRACES_SAMPLER": "always_on", "OTEL_TRACES_SAMPLER_ARG": "2"}) is None
    assert problem({"OTEL_TRACES_SAMPLER": "sometimes"}, sampler=True) is None
    assert problem({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, sampler=True) is None
