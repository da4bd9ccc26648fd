"""gateway/observe/otel_trace.py's trace context and failure wording, in process (the SDK's
in-memory exporter): the client's baggage sent on to the runtime, sampled or not, with no
ambient span taken for a parent; an attempt span's own attributes; a backend address without
a host; and an error's own message preferred to its str()."""

from __future__ import annotations

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, set_span_in_context

from gateway.observe.otel_trace import OtelTracing
from tests.gateway.observe.test_otel_trace_mutants import backend, request, scope, tracing


def test_the_clients_baggage_goes_on_to_the_runtime_and_an_ambient_span_is_no_parent():
    for sampler in (None, ALWAYS_OFF):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(sampler=sampler)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        t = OtelTracing(provider)
        ambient = TracerProvider().get_tracer("test").start_span("ambient")
        token = otel_context.attach(set_span_in_context(ambient))
        try:
            trace = t.request(scope([(b"baggage", b"tenant=acme")]), "chat")
            attempt = trace.attempt(backend(), request())
        finally:
            otel_context.detach(token)
        sent = dict(attempt.headers)
        assert sent["baggage"] == "tenant=acme"
        trace_id = int(sent["traceparent"].split("-")[1], 16)
        assert trace_id != ambient.get_span_context().trace_id  # a trace of its own
        if sampler is None:
            assert trace.span.parent is None


def test_an_attempt_span_has_the_operation_model_backend_and_runtime():
    t, exporter = tracing()
    trace = t.request(scope(), "text_completion")
    trace.attempt(backend("b7", adapter="sglang", served_model="served"), request()).end(RuntimeError("x"))
    (span,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]
    assert span.name == "text_completion served"
    assert dict(span.attributes) == {
        "gen_ai.operation.name": "text_completion",
        "gen_ai.provider.name": "sglang",
        "gen_ai.request.model": "served",
        "switchyard.backend": "b7",
        "switchyard.runtime": "sglang-runtime",
        "switchyard.upstream_request_id": "up-1",
        "error.type": "RuntimeError",
    }


def test_an_address_without_a_host_is_an_empty_one():
    t, _ = tracing()
    b = backend()
    b.config.url = "file:///sockets/runtime"
    assert t.server_attributes(b) == {"server.address": "", "server.port": 80}


class Worded(Exception):
    """An error whose own message is not its str()."""

    message = "what the client was told"

    def __str__(self) -> str:
        return "internal detail"


def test_a_failure_is_described_by_its_own_message_first():
    t, exporter = tracing()
    trace = t.request(scope(), "chat")
    trace.attempt(backend(), request()).end(Worded())
    (span,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]
    assert span.status.description == "what the client was told"


def test_no_ambient_span_is_a_parent_whatever_the_order_of_the_propagators():
    """OTEL_PROPAGATORS may put baggage first, whose extract starts from the ambient context
    when given none: the request's context starts empty all the same."""
    from opentelemetry import propagate
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.propagators.composite import CompositePropagator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    t, exporter = tracing()
    ambient = TracerProvider().get_tracer("test").start_span("ambient")
    kept = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([W3CBaggagePropagator(), TraceContextTextMapPropagator()]))
    token = otel_context.attach(set_span_in_context(ambient))
    try:
        trace = t.request(scope([(b"baggage", b"tenant=acme")]), "chat")
    finally:
        otel_context.detach(token)
        propagate.set_global_textmap(kept)
    trace.span.end()
    (span,) = exporter.get_finished_spans()
    assert span.parent is None and span.context.trace_id != ambient.get_span_context().trace_id
