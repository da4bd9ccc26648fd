"""Request traces: the hooks the request path calls, whether tracing is on or off.

One trace per request: a SERVER span named as the GenAI conventions say
(`{operation} {model}`: `chat`, `text_completion`, `generate_content` for the Responses
API, `embeddings`, `tokenize`, `detokenize`, each route's `ApiRoute.operation`), with
the HTTP server attributes, and children for authentication,
the quota reservation, the admission queue, each routing decision and each
upstream attempt (CLIENT, whose W3C `traceparent` the runtime receives), and an
event at the first token. docs/operations.md lists the spans and attributes.

Tracing off (the default, and always without the `otel` extra) costs a method call
per hook: `NoTracing.request` hands out `NO_TRACE`, whose hooks do nothing and
allocate nothing. Tracing on, gateway/observe/otel_trace.py (the only module that imports
OpenTelemetry) does the work.

The hooks deeper in the request path (protection, dispatch) find the request's trace
through a context variable that `request()` sets: each request runs in a task of its
own, and the tasks a request starts (its fan-out) inherit it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Protocol

from gateway.config.schema import ConfigError
from gateway.config.tracing import TracingConfig, resolve
from gateway.observe.context import NO_TRACE, RequestTrace, Scope, current_trace, make_current


class Tracing(Protocol):
    def request(self, scope: Scope, operation: str) -> RequestTrace: ...
    async def aclose(self) -> None: ...


class NoTracing:
    """Tracing off."""

    def request(self, scope: Scope, operation: str) -> RequestTrace:
        # A task that served a traced request before (an in-process client reusing
        # one task) must not lend its trace to this one.
        if current_trace() is not NO_TRACE:
            make_current(NO_TRACE)
        return NO_TRACE

    async def aclose(self) -> None:
        pass


def build_tracing(config: TracingConfig, env: Mapping[str, str] | None = None) -> Tracing:
    """The gateway's tracing for its config and environment; ConfigError when the
    settings cannot be served (the extra missing, an OTLP protocol it cannot speak)."""
    settings = resolve(config, os.environ if env is None else env)
    if settings.problem is not None:
        raise ConfigError(settings.problem)
    if not settings.enabled:
        return NoTracing()
    from gateway.observe.otel_trace import OtelTracing

    return OtelTracing.exporting(settings)
