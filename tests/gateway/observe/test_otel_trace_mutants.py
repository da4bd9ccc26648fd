"""gateway/observe/otel_trace.py's request, step and attempt spans in process, to the SDK's
in-memory exporter (no gateway, no network): a request span's HTTP and GenAI attributes, the
parsed request's sampling attributes, each attribute `finish` writes and each it leaves out
(at, below and above the status bounds), the response's attributes on the attempts that
served, the exporting provider's settings, and the shutdown's export cap."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from adapters.base import GenerationRequest, SamplingParams, Usage
from gateway.config.tracing import TracingSettings
from gateway.observe.context import Outcome, RequestContext, current_trace
from gateway.observe.otel_trace import OtelRequestTrace, OtelTracing, UnsampledTrace
from gateway.serving.phases import CancelPhase
from processes.install import installed_version

CLIENT_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
CLIENT_SPAN = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{CLIENT_TRACE:032x}-{CLIENT_SPAN:016x}-01".encode()


def tracing() -> tuple[OtelTracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelTracing(provider), exporter


def scope(headers=(), **extra) -> dict:
    return {"headers": list(headers), "method": "POST", "path": "/v1/chat/completions", **extra}


def backend(name="b1", adapter="vllm", served_model=None):
    config = SimpleNamespace(name=name, adapter=adapter, url=None, served_model=served_model)
    return SimpleNamespace(config=config, adapter=SimpleNamespace(runtime=f"{adapter}-runtime"))


def request(**sampling) -> GenerationRequest:
    return GenerationRequest(request_id="up-1", model="m", sampling=SamplingParams(**sampling))


def spans(exporter) -> dict:
    return {s.name: s for s in exporter.get_finished_spans()}


def test_a_request_span_has_the_http_attributes_and_the_api_type_of_its_operation():
    t, exporter = tracing()
    trace = t.request(scope(), "chat")
    assert isinstance(trace, OtelRequestTrace) and current_trace() is trace
    trace.span.end()
    responses = t.request(scope(scheme="https"), "generate_content")
    responses.span.end()
    embeddings = t.request(scope(), "embeddings")
    embeddings.span.end()
    chat, gc, emb = exporter.get_finished_spans()
    assert chat.kind is SpanKind.SERVER and chat.name == "chat" and chat.parent is None
    assert dict(chat.attributes) == {
        "gen_ai.operation.name": "chat",
        "http.request.method": "POST",
        "url.path": "/v1/chat/completions",
        "http.route": "/v1/chat/completions",
        "url.scheme": "http",
        "openai.api.type": "chat_completions",
    }
    assert gc.attributes["openai.api.type"] == "responses" and gc.attributes["url.scheme"] == "https"
    assert "openai.api.type" not in emb.attributes
    assert chat.instrumentation_scope.name == "switchyard"
    assert chat.instrumentation_scope.version == installed_version()


def test_the_clients_trace_context_is_continued_and_other_headers_are_not_read():
    t, exporter = tracing()
    trace = t.request(scope([(b"x-other", b"1"), (b"traceparent", TRACEPARENT)]), "chat")
    trace.span.end()
    (span,) = exporter.get_finished_spans()
    assert span.context.trace_id == CLIENT_TRACE and span.parent.span_id == CLIENT_SPAN
    # A header that only looks like one is not read: a fresh trace.
    fresh = t.request(scope([(b"x-traceparent", TRACEPARENT)]), "chat")
    assert fresh.span.get_span_context().trace_id != CLIENT_TRACE and fresh.span.parent is None


def test_a_step_is_an_internal_child_that_records_what_failed_in_it():
    t, exporter = tracing()
    trace = t.request(scope(), "chat")
    with trace.step("admission") as step:
        step.set("switchyard.queue_position", 3)
    with pytest.raises(ValueError), trace.step("route"):
        raise ValueError("no route")
    trace.span.end()
    got = spans(exporter)
    ok, failed = got["admission"], got["route"]
    assert ok.kind is SpanKind.INTERNAL and ok.parent.span_id == trace.span.get_span_context().span_id
    assert ok.attributes["switchyard.queue_position"] == 3 and ok.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR and failed.status.description == "no route"
    assert failed.attributes["error.type"] == "ValueError"


def test_the_parsed_request_gives_its_sampling_attributes_and_leaves_out_the_defaults():
    t, exporter = tracing()
    full = t.request(scope(), "chat")
    full.parsed(
        GenerationRequest(
            request_id="up-1",
            model="m",
            stream=True,
            sampling=SamplingParams(
                max_tokens=9,
                temperature=0.5,
                top_p=0.9,
                top_k=5,
                frequency_penalty=0.1,
                presence_penalty=0.2,
                seed=7,
                stop=["a", "b"],
                n=2,
            ),
        )
    )
    full.span.end()
    plain = t.request(scope(), "chat")
    plain.parsed(request())
    plain.span.end()
    a, b = exporter.get_finished_spans()
    assert (
        a.attributes.items()
        >= {
            "gen_ai.request.model": "m",
            "switchyard.stream": True,
            "gen_ai.request.stream": True,
            "gen_ai.request.max_tokens": 9,
            "gen_ai.request.temperature": 0.5,
            "gen_ai.request.top_p": 0.9,
            "gen_ai.request.frequency_penalty": 0.1,
            "gen_ai.request.presence_penalty": 0.2,
            "gen_ai.request.seed": 7,
            "gen_ai.request.stop_sequences": ("a", "b"),
            "gen_ai.request.choice.count": 2,
        }.items()
    )
    assert isinstance(a.attributes["gen_ai.request.top_k"], float) and a.attributes["gen_ai.request.top_k"] == 5.0
    given = {k: v for k, v in b.attributes.items() if k.startswith(("gen_ai.request.", "switchyard."))}
    assert given == {"gen_ai.request.model": "m", "switchyard.stream": False}


def test_a_one_shot_operation_records_its_model_only_and_a_long_one_is_clipped():
    t, exporter = tracing()
    trace = t.request(scope(), "embeddings")
    trace.parsed(GenerationRequest(request_id="u", model="a" * 300, stream=True, sampling=SamplingParams(n=3)))
    trace.span.end()
    (span,) = exporter.get_finished_spans()
    given = {k: v for k, v in span.attributes.items() if k.startswith(("gen_ai.request.", "switchyard."))}
    assert given == {"gen_ai.request.model": "a" * 256 + "...(300 characters)"}


def test_the_first_token_is_an_event_with_its_time():
    t, exporter = tracing()
    trace = t.request(scope(), "chat")
    trace.first_token(0.25)
    trace.span.end()
    (event,) = exporter.get_finished_spans()[0].events
    assert event.name == "switchyard.first_token"
    assert dict(event.attributes) == {"switchyard.time_to_first_token_s": 0.25}


def context(**fields) -> RequestContext:
    ctx = RequestContext(request_id="req-1", started=0.0, operation="chat")
    for key, value in fields.items():
        setattr(ctx, key, value)
    return ctx


def finished(outcome: Outcome, ctx: RequestContext | None = None, operation="chat", attempts=1, reasons=()):
    """A request with `attempts` attempts that served, finished with `outcome`: (server span, attempt spans)."""
    t, exporter = tracing()
    trace = t.request(scope(), operation)
    served = [trace.attempt(backend(f"b{i}", served_model=f"served-{i}"), request()) for i in range(attempts)]
    for attempt in served:
        attempt.end()  # released: the request's end ends it
    assert all(a.released for a in served) and exporter.get_finished_spans() == ()
    for reason in reasons:
        trace.finish_reason(reason)
    trace.finish(ctx or context(), outcome)
    assert trace.done
    got = exporter.get_finished_spans()
    server = next(s for s in got if s.kind is SpanKind.SERVER)
    return server, [s for s in got if s.kind is SpanKind.CLIENT]


def test_a_served_request_has_its_response_on_the_server_span_and_on_its_attempt():
    ctx = context(tenant="acme", upstream_id="up-9", model="m", ttft=0.3, queue_wait=0.02, response_id="chatcmpl-1")
    outcome = Outcome(200, usage=Usage(10, 4, cached_tokens=6), backend="b0")
    server, (attempt,) = finished(outcome, ctx, reasons=("stop", "length"))
    assert server.name == "chat m" and server.status.status_code is StatusCode.UNSET
    assert (
        server.attributes.items()
        >= {
            "http.response.status_code": 200,
            "switchyard.request_id": "req-1",
            "switchyard.tenant": "acme",
            "switchyard.upstream_id": "up-9",
            "switchyard.backend": "b0",
            "switchyard.time_to_first_token_s": 0.3,
            "switchyard.queue_wait_s": 0.02,
            "gen_ai.response.model": "served-0",
            "gen_ai.provider.name": "vllm",
            "gen_ai.response.id": "chatcmpl-1",
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.output_tokens": 4,
            "gen_ai.usage.cache_read.input_tokens": 6,
            "gen_ai.response.finish_reasons": ("stop", "length"),
        }.items()
    )
    assert "error.type" not in server.attributes and "switchyard.cancelled_phase" not in server.attributes
    assert (
        attempt.attributes.items()
        >= {
            "gen_ai.response.id": "chatcmpl-1",
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.output_tokens": 4,
            "gen_ai.response.model": "served-0",
            "gen_ai.response.finish_reasons": ("stop", "length"),
        }.items()
    )
    assert attempt.end_time <= server.end_time


def test_what_a_bare_request_leaves_out():
    server, _ = finished(Outcome(201, usage=Usage(3, 0)), context(response_id="chatcmpl-1"), attempts=0)
    left_out = (
        "switchyard.tenant",
        "switchyard.upstream_id",
        "switchyard.backend",
        "switchyard.time_to_first_token_s",
        "switchyard.queue_wait_s",
        "gen_ai.response.model",
        "gen_ai.provider.name",
        "gen_ai.response.id",  # only a 200's
        "gen_ai.usage.cache_read.input_tokens",  # none cached
        "gen_ai.response.finish_reasons",
        "error.type",
    )
    assert [k for k in left_out if k in server.attributes] == []
    assert server.name == "chat"  # no model known: the operation only
    assert server.attributes["gen_ai.usage.output_tokens"] == 0
    assert "gen_ai.usage.input_tokens" not in finished(Outcome(200), attempts=0)[0].attributes


def test_a_one_shot_request_has_no_output_tokens_and_a_fan_out_no_usage_on_its_attempts():
    server, _ = finished(Outcome(200, usage=Usage(5, 0)), operation="embeddings")
    assert server.attributes["gen_ai.usage.input_tokens"] == 5 and "gen_ai.usage.output_tokens" not in server.attributes
    server, attempts = finished(Outcome(200, usage=Usage(5, 8)), context(response_id="x"), attempts=2)
    assert server.attributes["gen_ai.response.model"] == "served-1"  # the last that served
    for i, attempt in enumerate(attempts):
        assert not any(".usage." in k for k in attempt.attributes)
        assert attempt.attributes["gen_ai.response.model"] == f"served-{i}"
        assert attempt.attributes["gen_ai.response.id"] == "x"


def test_a_failed_attempt_is_not_one_that_served():
    t, exporter = tracing()
    trace = t.request(scope(), "chat")
    failed = trace.attempt(backend("b0", served_model="bad"), request())
    failed.end(RuntimeError("refused"))
    failed.end()  # a second end changes nothing
    ok = trace.attempt(backend("b1", adapter="sglang", served_model="good"), request())
    ok.end()
    trace.finish(context(), Outcome(200, usage=Usage(1, 2)))
    got = spans(exporter)
    assert got["chat good"].attributes["gen_ai.usage.output_tokens"] == 2  # the one that served: the whole usage
    assert "gen_ai.response.model" not in got["chat bad"].attributes
    assert got["chat bad"].status.status_code is StatusCode.ERROR and failed.failed and not failed.released
    server = got["chat"]
    assert server.attributes["gen_ai.provider.name"] == "sglang"


def test_an_attempt_ended_after_its_request_ends_at_once():
    t, exporter = tracing()
    trace = t.request(scope(), "chat")
    attempt = trace.attempt(backend(), request())
    trace.finish(context(), Outcome(200))
    attempt.end()
    assert not attempt.released and len(exporter.get_finished_spans()) == 2


@pytest.mark.parametrize(
    ("status", "error", "code", "is_error", "error_type"),
    [
        (399, None, None, False, None),
        (400, None, None, False, "400"),
        (404, "no such model", "model_not_found", False, "model_not_found"),
        (499, None, "client_closed", False, "client_closed"),
        (500, None, None, True, "500"),
        (503, "backend said password=pw", "backend_unavailable", True, "backend_unavailable"),
    ],
)
def test_an_error_type_from_400_and_an_error_status_from_500(status, error, code, is_error, error_type):
    server, _ = finished(Outcome(status, error=error, code=code), context(model="m"), attempts=0)
    assert server.attributes.get("error.type") == error_type
    assert (server.status.status_code is StatusCode.ERROR) is is_error
    if is_error:
        assert server.status.description == ("backend said password=***" if error else str(status))
    # A model that does not exist stays out of the span name.
    assert server.name == ("chat" if code == "model_not_found" else "chat m")


def test_a_cancelled_request_names_its_phase():
    server, _ = finished(Outcome(499, cancelled_phase=CancelPhase.MID_STREAM), attempts=0)
    assert server.attributes["switchyard.cancelled_phase"] == "mid_stream"


def test_an_unsampled_request_sends_its_context_as_not_sampled_once():
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace = OtelTracing(provider).request(scope([(b"traceparent", TRACEPARENT)]), "chat")
    assert isinstance(trace, UnsampledTrace) and current_trace() is trace
    assert trace.headers is None
    attempt = trace.attempt(backend(), request())
    assert attempt.span is trace.span and attempt.trace is None
    own = trace.span.get_span_context().span_id
    assert dict(attempt.headers)["traceparent"] == f"00-{CLIENT_TRACE:032x}-{own:016x}-00"
    attempt.end()
    assert attempt.ended and exporter.get_finished_spans() == ()


def settings(**fields) -> TracingSettings:
    base = {"enabled": True, "endpoint": "http://127.0.0.1:9/v1/traces", "sample_ratio": None}
    return TracingSettings(**{**base, "service_name": None, "headers": None, "problem": None, **fields})


def sent_headers(exporter) -> dict:
    """The headers the OTLP exporter sends (its HTTP client's: the SDK keeps them there)."""
    return exporter._client._headers


def test_the_exporting_provider_takes_the_settings():
    t = OtelTracing.exporting(settings(service_name="gw", sample_ratio=0.25, headers={"x-key": "k"}))
    try:
        assert t.provider.resource.attributes["service.name"] == "gw"
        assert t.provider.resource.attributes["service.version"] == installed_version()
        assert t.provider.sampler.get_description().startswith("ParentBased{root:TraceIdRatioBased{0.25},")
        assert t.exporter._endpoint == "http://127.0.0.1:9/v1/traces"  # type: ignore[attr-defined]
        assert sent_headers(t.exporter)["x-key"] == "k"
    finally:
        t.provider.shutdown()
    plain = OtelTracing.exporting(settings())
    try:
        # the SDK's defaults: its own service name, its sampler (parent based, always on)
        assert plain.provider.resource.attributes["service.name"] != "gw"
        assert plain.provider.sampler.get_description().startswith("ParentBased{root:AlwaysOnSampler,")
        assert "x-key" not in sent_headers(plain.exporter)
    finally:
        plain.provider.shutdown()


class Stuck(SpanExporter):
    """An exporter whose export waits until it is shut down (a collector that never answers)."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.shutdowns = 0

    def export(self, spans):
        self.released.wait(30)
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.shutdowns += 1
        self.released.set()


async def test_the_stop_cuts_a_stuck_export_at_the_cap_and_leaves_a_quick_one_alone():
    stuck = Stuck()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(stuck))
    t = OtelTracing(provider, stuck)
    provider.shutdown = lambda: t.provider.get_tracer("x").start_span("last").end()  # type: ignore[method-assign]
    await t.aclose(export_s=0.05)
    assert stuck.shutdowns == 1  # cut by aclose, which released the export
    quick = Stuck()
    quick.released.set()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(quick))
    t = OtelTracing(provider, quick)
    await t.aclose(export_s=5)
    assert quick.shutdowns == 1  # the provider's own shutdown only
