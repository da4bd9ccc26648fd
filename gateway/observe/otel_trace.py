"""Request traces with OpenTelemetry (the `otel` extra): the one module that imports it.

Spans are started with their parent given explicitly (never through OpenTelemetry's
ambient context), so a request's spans stay together across the tasks its fan-out
runs in and nothing is attached or detached on the hot path. The client's W3C trace
context is continued; each upstream attempt's is sent to the runtime.

Attributes follow the OpenTelemetry GenAI conventions (gen_ai.*), the general ones,
and switchyard.* for what only the gateway knows; docs/operations.md lists them all.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import propagate
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context

from adapters.base import GenerationRequest
from gateway.backends.backend_set import Backend
from gateway.config.tracing import TracingSettings
from gateway.observe.context import (
    Attempt,
    NoTrace,
    Outcome,
    RawHeaders,
    RequestContext,
    RequestTrace,
    Scope,
    Step,
    error_type,
    make_current,
)
from policies.redact import public_message, shown_name
from processes.install import installed_version

# gen_ai.provider.name per adapter kind: the runtime that generates, as the GenAI
# conventions' "instrumentation's best knowledge" (well-known values where there is one).
PROVIDERS = {
    "openai": "openai",
    "vllm": "vllm",
    "sglang": "sglang",
    "trtllm": "tensorrt_llm",
    "tgi": "tgi",
    "native": "switchyard",
    "llamacpp": "llama.cpp",
}
# The W3C trace-context headers (and baggage) a client may send.
CONTEXT_HEADERS = (b"traceparent", b"tracestate", b"baggage")
INSTRUMENTATION = "switchyard"
# At shutdown, the spans left are exported for at most this long: a collector that is
# down must not hold a stopping gateway past its grace (the chart's margin is 5 s; the
# exporter alone retries for OTEL_EXPORTER_OTLP_TIMEOUT, 10 s by default).
SHUTDOWN_EXPORT_S = 2.0
# openai.api.type per operation: the OpenAI conventions tell their two APIs apart by it.
API_TYPES = {"chat": "chat_completions", "generate_content": "responses"}
# Operations that generate nothing: no sampling parameters, no output tokens.
ONE_SHOT = frozenset({"embeddings", "tokenize", "detokenize"})


def _version() -> str:
    return installed_version()


class OtelTracing:
    """Tracing on: one tracer over its own provider (never the process-global one, so
    several gateways in one process keep their exporters apart)."""

    def __init__(self, provider: TracerProvider, exporter: SpanExporter | None = None) -> None:
        self.provider = provider
        self.exporter = exporter
        self.tracer = provider.get_tracer(INSTRUMENTATION, _version())
        self._servers: dict[str, dict[str, Any]] = {}

    @classmethod
    def exporting(cls, settings: TracingSettings) -> OtelTracing:
        """Spans exported over OTLP/HTTP in batches, from a thread of the SDK's."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        attributes: dict[str, Any] = {"service.version": _version()}
        if settings.service_name is not None:
            attributes["service.name"] = settings.service_name
        sampler = None if settings.sample_ratio is None else ParentBased(TraceIdRatioBased(settings.sample_ratio))
        provider = TracerProvider(resource=Resource.create(attributes), sampler=sampler)
        exporter = OTLPSpanExporter(
            endpoint=settings.endpoint, headers=None if settings.headers is None else dict(settings.headers)
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider, exporter)

    def request(self, scope: Scope, operation: str) -> RequestTrace:
        headers: RawHeaders = scope["headers"]
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers if k in CONTEXT_HEADERS}
        parent = propagate.extract(carrier, context=Context()) if carrier else Context()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "http.request.method": scope["method"],
            "url.path": scope["path"],
            # every API route is a fixed path: its template is itself
            "http.route": scope["path"],
            "url.scheme": scope.get("scheme", "http"),
        }
        if operation in API_TYPES:
            attributes["openai.api.type"] = API_TYPES[operation]
        span = self.tracer.start_span(operation, context=parent, kind=SpanKind.SERVER, attributes=attributes)
        trace: RequestTrace
        if span.is_recording():
            trace = OtelRequestTrace(self, span, parent, operation)
        else:
            trace = UnsampledTrace(span, parent)
        make_current(trace)
        return trace

    def server_attributes(self, backend: Backend) -> dict[str, Any]:
        """server.address and server.port of a backend's runtime (none for the native engine)."""
        attrs = self._servers.get(backend.config.name)
        if attrs is None:
            attrs = {}
            url = backend.config.url
            if url:
                parts = urlsplit(url)
                attrs["server.address"] = parts.hostname or ""
                attrs["server.port"] = parts.port or (443 if parts.scheme == "https" else 80)
            self._servers[backend.config.name] = attrs
        return attrs

    async def aclose(self, export_s: float = SHUTDOWN_EXPORT_S) -> None:
        """Export what is left (the exporter blocks: off the event loop), for at most
        `export_s`; then the exporter is shut down, which ends its retries and its
        request, and what is still unsent is dropped."""
        closing = asyncio.ensure_future(asyncio.to_thread(self.provider.shutdown))
        done, _ = await asyncio.wait({closing}, timeout=export_s)
        if not done and self.exporter is not None:
            self.exporter.shutdown()
        await closing


class OtelStep:
    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def __enter__(self) -> OtelStep:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if exc is not None:
            _failed(self.span, exc)
        self.span.end()

    def set(self, key: str, value: str | int | float | bool) -> None:
        self.span.set_attribute(key, value)


class OtelAttempt:
    """One upstream attempt's CLIENT span. A failed attempt ends at once; one that
    served waits for its request's end (`OtelRequestTrace.finish`), which gives it the
    response's attributes (usage, finish reasons, id, model), since backends that read
    client inference spans look for them there."""

    __slots__ = ("span", "headers", "ended", "failed", "released", "trace", "model", "provider")

    def __init__(
        self,
        span: Span,
        headers: tuple[tuple[str, str], ...],
        trace: OtelRequestTrace | None = None,
        model: str = "",
        provider: str = "",
    ) -> None:
        self.span = span
        self.headers = headers
        self.ended = False
        self.failed = False
        self.released = False  # its stream was closed before the request's end
        self.trace = trace
        self.model = model  # the served model (the backend's name for it)
        self.provider = provider

    def stamp(self, request: GenerationRequest) -> GenerationRequest:
        return dataclasses.replace(request, trace_headers=self.headers)

    def end(self, error: BaseException | None = None) -> None:
        if self.ended:
            return
        self.ended = True
        if error is not None:
            self.failed = True
            _failed(self.span, error)
        elif self.trace is not None and not self.trace.done:
            self.released = True  # the request's end ends it, with the response's attributes
            return
        self.span.end()


class UnsampledTrace(NoTrace):
    """A request the sampler left out: no spans are recorded (every other hook does
    nothing), but the runtimes still get its trace context (flagged not sampled), so
    that they leave it out too."""

    __slots__ = ("span", "parent", "headers")

    def __init__(self, span: Span, parent: Context) -> None:
        self.span = span
        self.parent = parent
        self.headers: tuple[tuple[str, str], ...] | None = None

    def attempt(self, backend: Backend, request: GenerationRequest) -> Attempt:
        if self.headers is None:
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=set_span_in_context(self.span, self.parent))
            self.headers = tuple(carrier.items())
        return OtelAttempt(self.span, self.headers)


class OtelRequestTrace:
    __slots__ = ("tracing", "span", "context", "operation", "finish_reasons", "attempts", "done")

    def __init__(self, tracing: OtelTracing, span: Span, parent: Context, operation: str) -> None:
        self.tracing = tracing
        self.operation = operation
        self.span = span
        self.context = set_span_in_context(span, parent)
        self.finish_reasons: list[str] = []
        self.attempts: list[OtelAttempt] = []
        self.done = False

    def step(self, name: str) -> Step:
        return OtelStep(self.tracing.tracer.start_span(name, context=self.context, kind=SpanKind.INTERNAL))

    def attempt(self, backend: Backend, request: GenerationRequest) -> Attempt:
        cfg = backend.config
        model = cfg.served_model or request.model
        provider = PROVIDERS.get(cfg.adapter, cfg.adapter)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": self.operation,
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "switchyard.backend": cfg.name,
            "switchyard.runtime": backend.adapter.runtime,
            "switchyard.upstream_request_id": request.request_id,
            **self.tracing.server_attributes(backend),
        }
        span = self.tracing.tracer.start_span(
            f"{self.operation} {model}", context=self.context, kind=SpanKind.CLIENT, attributes=attributes
        )
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=set_span_in_context(span, self.context))
        attempt = OtelAttempt(span, tuple(carrier.items()), self, model, provider)
        self.attempts.append(attempt)
        return attempt

    def parsed(self, request: GenerationRequest) -> None:
        attrs: dict[str, Any] = {"gen_ai.request.model": shown_name(request.model)}
        if self.operation in ONE_SHOT:  # nothing is generated: no sampling to record
            self.span.set_attributes(attrs)
            return
        s = request.sampling
        attrs["switchyard.stream"] = request.stream
        if request.stream:
            attrs["gen_ai.request.stream"] = True  # the conventions: set if and only if streaming
        for key, value in (
            ("gen_ai.request.max_tokens", s.max_tokens),
            ("gen_ai.request.temperature", s.temperature),
            ("gen_ai.request.top_p", s.top_p),
            # a double in the conventions (an int on the wire)
            ("gen_ai.request.top_k", None if s.top_k is None else float(s.top_k)),
            ("gen_ai.request.frequency_penalty", s.frequency_penalty),
            ("gen_ai.request.presence_penalty", s.presence_penalty),
            ("gen_ai.request.seed", s.seed),
        ):
            if value is not None:
                attrs[key] = value
        if s.stop:
            attrs["gen_ai.request.stop_sequences"] = list(s.stop)
        if s.n != 1:
            attrs["gen_ai.request.choice.count"] = s.n
        self.span.set_attributes(attrs)

    def first_token(self, ttft: float) -> None:
        self.span.add_event("switchyard.first_token", {"switchyard.time_to_first_token_s": ttft})

    def finish_reason(self, reason: str) -> None:
        self.finish_reasons.append(reason)

    def finish(self, ctx: RequestContext, outcome: Outcome) -> None:
        span = self.span
        attrs: dict[str, Any] = {
            "http.response.status_code": outcome.status,
            "switchyard.request_id": ctx.request_id,
        }
        if ctx.tenant is not None:
            attrs["switchyard.tenant"] = ctx.tenant
        if ctx.upstream_id is not None:
            attrs["switchyard.upstream_id"] = ctx.upstream_id
        if ctx.model is not None and outcome.code != "model_not_found":
            # A model that does not exist stays out of the span name: names must stay few.
            span.update_name(f"{self.operation} {ctx.model}")
        served = [a for a in self.attempts if not a.failed]
        response = self._response(ctx, outcome, served)
        attrs.update(response)
        if outcome.backend is not None:
            attrs["switchyard.backend"] = outcome.backend
        if ctx.ttft is not None:
            attrs["switchyard.time_to_first_token_s"] = ctx.ttft
        if ctx.queue_wait:
            attrs["switchyard.queue_wait_s"] = ctx.queue_wait
        if outcome.cancelled_phase is not None:
            attrs["switchyard.cancelled_phase"] = outcome.cancelled_phase.value
        if outcome.status >= 400:
            attrs["error.type"] = outcome.code or str(outcome.status)
        span.set_attributes(attrs)
        # A server span is an error for a 5xx only: a 4xx is the client's (HTTP conventions).
        if outcome.status >= 500:
            span.set_status(Status(StatusCode.ERROR, public_message(outcome.error or str(outcome.status))))
        self.done = True
        # The attempts that served carry the response too (ended before their parent);
        # usage only when one attempt made the whole answer (fanned-out sub-requests'
        # own counts are not known).
        for attempt in served:
            own = response if len(served) == 1 else {k: v for k, v in response.items() if ".usage." not in k}
            attempt.span.set_attributes({**own, "gen_ai.response.model": attempt.model})
            if attempt.released:
                attempt.span.end()
        span.end()

    def _response(self, ctx: RequestContext, outcome: Outcome, served: list[OtelAttempt]) -> dict[str, Any]:
        """The response's GenAI attributes, for the request span and its serving attempts."""
        attrs: dict[str, Any] = {}
        if served:
            # the model that answered: the backend's name for it, as the runtime reports it
            attrs["gen_ai.response.model"] = served[-1].model
            attrs["gen_ai.provider.name"] = served[-1].provider
        if ctx.response_id is not None and outcome.status == 200:
            attrs["gen_ai.response.id"] = ctx.response_id
        if outcome.usage is not None:
            attrs["gen_ai.usage.input_tokens"] = outcome.usage.prompt_tokens
            if self.operation not in ONE_SHOT:
                attrs["gen_ai.usage.output_tokens"] = outcome.usage.completion_tokens
            if outcome.usage.cached_tokens:
                attrs["gen_ai.usage.cache_read.input_tokens"] = outcome.usage.cached_tokens
        if self.finish_reasons:
            attrs["gen_ai.response.finish_reasons"] = list(self.finish_reasons)
        return attrs


def _failed(span: Span, error: BaseException) -> None:
    span.set_attribute("error.type", error_type(error))
    said = getattr(error, "message", None) or str(error) or type(error).__name__
    span.set_status(Status(StatusCode.ERROR, public_message(said)))
