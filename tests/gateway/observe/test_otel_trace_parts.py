"""gateway/observe/otel_trace.py's parts in process, spans to the SDK's in-memory exporter:
a backend's server.address and server.port (the scheme's default port, kept per backend), an
attempt span's attributes (the provider name by adapter kind, the upstream request id), the
attempt's traceparent under the request's trace, a failed attempt's status description, and
an unsampled request's trace context sent on."""

from __future__ import annotations

from types import SimpleNamespace

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode

from adapters.base import GenerationRequest
from adapters.errors import GatewayError
from gateway.observe.otel_trace import OtelTracing

CLIENT_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
TRACEPARENT = f"00-{CLIENT_TRACE:032x}-{0x00F067AA0BA902B7:016x}-01".encode()


def tracing(sampler=None) -> tuple[OtelTracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelTracing(provider), exporter


def backend(name="b1", adapter="vllm", url="http://runtime:8000/v1", served_model=None):
    config = SimpleNamespace(name=name, adapter=adapter, url=url, served_model=served_model)
    return SimpleNamespace(config=config, adapter=SimpleNamespace(runtime=adapter))


def scope() -> dict:
    return {"headers": [(b"traceparent", TRACEPARENT)], "method": "POST", "path": "/v1/chat/completions"}


REQUEST = GenerationRequest(model="m", messages=[{"role": "user", "content": "hi"}], request_id="up-1")


def test_a_backends_server_address_and_port_with_the_schemes_default():
    t, _ = tracing()
    assert t.server_attributes(backend(url="https://secure.example/v1")) == {
        "server.address": "secure.example",
        "server.port": 443,
    }
    assert t.server_attributes(backend("b2", url="http://plain.example/v1")) == {
        "server.address": "plain.example",
        "server.port": 80,
    }
    assert t.server_attributes(backend("b3", url="https://h:8443/v1"))["server.port"] == 8443
    assert t.server_attributes(backend("native", url=None)) == {}
    # Kept per backend: the first answer stands for the backend's name.
    first = t.server_attributes(backend("b4", url="http://a:1/v1"))
    assert t.server_attributes(backend("b4", url="http://b:2/v1")) is first and first["server.address"] == "a"


def attempt_span(adapter: str, error: BaseException | None = None):
    t, exporter = tracing()
    trace = t.request(scope(), "chat")
    attempt = trace.attempt(backend(adapter=adapter), REQUEST)
    stamped = attempt.stamp(REQUEST)
    attempt.end(error if error is not None else RuntimeError("stop"))
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "chat m"]
    return span, stamped


def test_an_attempt_span_names_the_provider_by_adapter_kind_and_the_upstream_request():
    span, stamped = attempt_span("trtllm")
    attrs = span.attributes
    assert attrs["gen_ai.provider.name"] == "tensorrt_llm" and attrs["switchyard.upstream_request_id"] == "up-1"
    assert (attrs["server.address"], attrs["server.port"]) == ("runtime", 8000)
    assert attempt_span("custom-runtime")[0].attributes["gen_ai.provider.name"] == "custom-runtime"
    # The runtime gets the attempt's own span under the client's trace.
    (header,) = [v for k, v in stamped.trace_headers if k == "traceparent"]
    assert header == f"00-{CLIENT_TRACE:032x}-{span.context.span_id:016x}-01"


def test_a_failed_attempt_says_why_masked_or_by_its_class():
    span, _ = attempt_span("vllm", GatewayError(502, "runtime said password=pw", code="upstream_error"))
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "runtime said password=***"
    assert span.attributes["error.type"] == "upstream_error"
    assert attempt_span("vllm", ValueError("plain words"))[0].status.description == "plain words"
    assert attempt_span("vllm", ValueError())[0].status.description == "ValueError"


def test_an_unsampled_request_still_sends_its_trace_context_on():
    t, exporter = tracing(ALWAYS_OFF)
    trace = t.request(scope(), "chat")
    first = trace.attempt(backend(), REQUEST)
    again = trace.attempt(backend("b2"), REQUEST)
    (header,) = [v for k, v in first.headers if k == "traceparent"]
    assert header.startswith(f"00-{CLIENT_TRACE:032x}-") and header.endswith("-00")
    assert again.headers is first.headers and exporter.get_finished_spans() == ()
