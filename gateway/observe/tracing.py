"""Request traces: the hooks the request path calls, whether tracing is on or off.

One trace per request: a SERVER span named as the GenAI conventions say
(`chat {model}`, `text_completion {model}`), with children for authentication,
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
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from adapters.base import GenerationRequest
from adapters.errors import GatewayError
from gateway.config.schema import ConfigError
from gateway.config.tracing import TracingConfig, resolve

if TYPE_CHECKING:
    from gateway.backends.backend_set import Backend
    from gateway.observe.recorder import Outcome, RequestContext

# ASGI headers: (lower-case name, value) byte pairs.
RawHeaders = list[tuple[bytes, bytes]]


class Step(Protocol):
    """A phase of the request (a child span), used as a context manager."""

    def __enter__(self) -> Step: ...
    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None: ...
    def set(self, key: str, value: str | int | float | bool) -> None: ...


class Attempt(Protocol):
    """One upstream attempt (a CLIENT span). `stamp` gives the request the adapter
    sends, with the attempt's trace headers; `end` ends it, once, failed or not."""

    def stamp(self, request: GenerationRequest) -> GenerationRequest: ...
    def end(self, error: BaseException | None = None) -> None: ...


class RequestTrace(Protocol):
    def step(self, name: str) -> Step: ...
    def attempt(self, backend: Backend, request: GenerationRequest) -> Attempt: ...
    def parsed(self, request: GenerationRequest) -> None: ...
    def first_token(self, ttft: float) -> None: ...
    def finish_reason(self, reason: str) -> None: ...
    def finish(self, ctx: RequestContext, outcome: Outcome) -> None: ...


class Tracing(Protocol):
    def request(self, headers: RawHeaders, chat: bool) -> RequestTrace: ...
    async def aclose(self) -> None: ...


class _NoStep:
    __slots__ = ()

    def __enter__(self) -> _NoStep:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        pass

    def set(self, key: str, value: str | int | float | bool) -> None:
        pass


class _NoAttempt:
    """The attempt of an untraced request: the request goes upstream unchanged."""

    __slots__ = ()

    def stamp(self, request: GenerationRequest) -> GenerationRequest:
        return request

    def end(self, error: BaseException | None = None) -> None:
        pass


class NoTrace:
    """The trace of a request when tracing is off: every hook does nothing."""

    __slots__ = ()

    def step(self, name: str) -> Step:
        return NO_STEP

    def attempt(self, backend: Backend, request: GenerationRequest) -> Attempt:
        return NO_ATTEMPT

    def parsed(self, request: GenerationRequest) -> None:
        pass

    def first_token(self, ttft: float) -> None:
        pass

    def finish_reason(self, reason: str) -> None:
        pass

    def finish(self, ctx: RequestContext, outcome: Outcome) -> None:
        pass


NO_STEP = _NoStep()
NO_ATTEMPT = _NoAttempt()
NO_TRACE = NoTrace()
_CURRENT: ContextVar[RequestTrace] = ContextVar("switchyard_request_trace", default=NO_TRACE)


def current() -> RequestTrace:
    """The trace of the request this task serves (NO_TRACE when none is traced)."""
    return _CURRENT.get()


def make_current(trace: RequestTrace) -> None:
    _CURRENT.set(trace)


class NoTracing:
    """Tracing off."""

    def request(self, headers: RawHeaders, chat: bool) -> RequestTrace:
        # A task that served a traced request before (an in-process client reusing
        # one task) must not lend its trace to this one.
        if _CURRENT.get() is not NO_TRACE:
            _CURRENT.set(NO_TRACE)
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


def error_type(error: BaseException) -> str:
    """The low-cardinality `error.type` of a failure: the gateway's error code, else
    the status, else the exception's class."""
    if isinstance(error, GatewayError):
        return error.code or str(error.status)
    return type(error).__name__
