"""One request's record as it goes: its identity and timings (`RequestContext`), how it
ended (`Outcome`), and the trace hooks it carries (`RequestTrace`; `NO_TRACE` when
tracing is off). The recorder (recorder.py) writes them down; tracing.py and
otel_trace.py make the traces."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from adapters.base import GenerationRequest, Usage
from adapters.errors import FailureKind, GatewayError
from gateway.serving.phases import CancelPhase

if TYPE_CHECKING:
    from gateway.backends.backend_set import Backend
    from gateway.serving.rollout import RolloutRequest

# ASGI headers: (lower-case name, value) byte pairs.
RawHeaders = list[tuple[bytes, bytes]]
# An ASGI request scope (its `headers`, `method`, `path`, `scheme`).
Scope = MutableMapping[str, Any]


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


# current_trace(): the trace of the request this task serves (NO_TRACE when none is
# traced). The context variable's own `get`, called from C: no Python frame on every
# traced step of every request.
current_trace: Callable[[], RequestTrace] = _CURRENT.get


def make_current(trace: RequestTrace) -> None:
    _CURRENT.set(trace)


@dataclass
class RequestContext:
    """One request's identity and timings, filled in along its way."""

    request_id: str  # the client's x-request-id when it sent a plain one, else the gateway's
    started: float  # time.perf_counter() at arrival
    operation: str  # what the route does, as the trace names it: chat, text_completion, embeddings, tokenize, ...
    upstream_id: str | None = None  # the gateway's own id, the one runtimes saw (their logs name it)
    config_version: str | None = None  # the config version in force when it arrived (gateway/lifecycle/reload.py)
    model: str | None = None
    tenant: str | None = None
    trace: RequestTrace = field(default=NO_TRACE, repr=False)
    # Filled in along the way, never at construction: class defaults until then
    # (init=False: the generated __init__ writes none of them per request).
    stream: bool = field(default=False, init=False)
    # Time the gateway spent waiting, not working: none of it is gateway overhead.
    queue_wait: float = field(default=0.0, init=False)  # in the admission queue
    upstream_wait: float = field(default=0.0, init=False)  # for the backend's events, the first one included
    backoff_wait: float = field(default=0.0, init=False)  # between retry rounds
    ttft: float | None = field(default=None, init=False)
    response_id: str | None = field(default=None, init=False)  # the answer's id (chatcmpl-..., cmpl-...)


@dataclass
class Outcome:
    """How a request ended."""

    status: int
    usage: Usage | None = None
    backend: str | None = None
    error: str | None = None
    cancelled_phase: CancelPhase | None = None
    dropped_params: tuple[str, ...] = ()  # parameters the backend's runtime could not apply, dropped
    code: str | None = None  # the error's code
    admitted: bool = True  # False: answered before admission (auth, validation, quota, queue)
    rollout: RolloutRequest | None = None  # a model under rollout: its tracks and its answer's tally
    failure: FailureKind | None = None  # the error's kind (GatewayError.failure): a rollout classes it by that

    @classmethod
    def refused(cls, err: GatewayError) -> Outcome:
        """A request answered with `err` before admission (a client leaving the queue included)."""
        phase = CancelPhase(err.cancelled_phase) if err.cancelled_phase else None
        return cls(err.status, error=err.message, cancelled_phase=phase, code=err.code, admitted=False)


def error_type(error: BaseException) -> str:
    """The low-cardinality `error.type` of a failure: the gateway's error code, else
    the status, else the exception's class."""
    if isinstance(error, GatewayError):
        return error.code or str(error.status)
    return type(error).__name__
