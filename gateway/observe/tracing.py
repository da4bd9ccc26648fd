"""Request traces: the hooks the request path calls, whether tracing is on or off.
One SERVER span per request named as the GenAI conventions say (`{operation} {model}`,
the route's `ApiRoute.operation`), with children for authentication, quota, queue,
each routing decision and each upstream attempt, and an event at the first token
(docs/operations.md lists spans and attributes). Off (the default), a hook is a method
call on `NO_TRACE` that allocates nothing; on, gateway/observe/otel_trace.py does the
work. Deeper hooks find the request's trace through a context variable `request()`
sets, which the tasks a request starts inherit.
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
