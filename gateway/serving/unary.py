"""The way of a call that generates nothing (`/v1/embeddings`, `/tokenize`,
`/detokenize`): one upstream call, one JSON answer.

The order is the chat route's: authenticate, read and validate the body, check the model
(a model outside the tenant's list answers exactly as a missing one: 404), check that a
backend of the model serves the call (400 naming the model when none does: nothing is
reserved for a request that cannot be served), admit (quota and the model's fair queue,
`Protection.admit`), call, release the ticket with the real usage.

The call runs inside the ASGI response, as a generation does (gateway/serving/generation.py),
so a client that leaves cancels it: HTTP adapters then close the upstream connection,
the native engine runs no further pass, and the ticket is released for the phase it was
in. Backends are the model's capable ones in its routing order (`policies/routing.py`
on their views only, so the capability filter is exact and routing state is not
touched); a failure that is the backend's (no connection, overload, a runtime's 5xx:
`dispatch.fails_over`) moves on to the next, a client's mistake (4xx) is the answer.
Every attempt's outcome feeds the pool's outlier detector, and ejected backends are
skipped, as for generations.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from adapters.base import Adapter, GenerationRequest, SamplingParams, Usage
from adapters.errors import GatewayError, client_closed, model_not_found
from gateway.backends.backend_set import Backend, BackendSet, ModelPool
from gateway.config.schema import GatewayConfig
from gateway.http.envelope import error_response, json_response
from gateway.http.request_io import client_request_id, new_request_id, read_body
from gateway.observe.context import Outcome, RequestContext
from gateway.observe.recorder import RequestRecorder
from gateway.openai.requests import parse_json_body
from gateway.protection.gate import Protection, Ticket
from gateway.serving.dispatch import FailureListener, fails_over, failure_kind, record_outcome
from gateway.serving.phases import CancelPhase
from policies.auth import credential_headers

log = logging.getLogger("switchyard.unary")

T = TypeVar("T")
C = TypeVar("C")


@dataclass
class Parsed(Generic[C]):
    """A validated call (`call`: the adapter's request), its model, what routing and
    admission read (a generation-shaped stand-in that generates nothing: `max_tokens` 0),
    and the prompt tokens to reserve."""

    call: C
    model: str
    route_request: GenerationRequest
    prompt_estimate: int


def route_request(request_id: str, model: str, prompt: Any = None, messages: list | None = None) -> GenerationRequest:
    """The stand-in routing and admission read: the prompt (or messages) for the routing
    key, no completion budget."""
    return GenerationRequest(
        request_id=request_id,
        model=model,
        kind="chat" if messages is not None else "completion",
        messages=messages,
        prompt=prompt,
        sampling=SamplingParams(max_tokens=0),
    )


@dataclass
class Admitted(Generic[C]):
    """A call past admission: the call, what it holds, the backends to try in order."""

    parsed: Parsed[C]
    ctx: RequestContext
    ticket: Ticket
    backends: list[Backend]


class UnaryGate:
    """Everything up to admission, for the calls that generate nothing."""

    def __init__(
        self,
        config: Callable[[], GatewayConfig],
        protection: Protection,
        backends: BackendSet,
        recorder: RequestRecorder,
        on_failure: FailureListener | None = None,
    ) -> None:
        self.config = config  # the config in force: a reload replaces it (gateway/lifecycle/reload.py)
        self.protection = protection
        self.backends = backends
        self.recorder = recorder
        self.on_failure = on_failure

    async def admit(
        self, request: Request, capability: str, what: str, parse: Callable[[dict[str, Any], str], Parsed[C]]
    ) -> Admitted[C] | Response:
        """The admitted call, or the error response (recorded) when it went no further.
        `capability`: the `Capabilities` field a backend needs; `what`: its name for users."""
        upstream_id = new_request_id()  # the gateway's own id, sent upstream (never the client's)
        ctx = RequestContext(
            request_id=client_request_id(request.headers.get("x-request-id")) or upstream_id,
            started=time.perf_counter(),
            chat=False,
            upstream_id=upstream_id,
        )
        try:
            principal = await self.protection.authenticate(credential_headers(request.scope["headers"]))
            ctx.tenant = principal.tenant
            limits = self.config().limits
            raw = await read_body(request, limits.max_body_bytes)
            parsed = parse(parse_json_body(raw, limits.max_json_depth), upstream_id)
            ctx.model = parsed.model
            pool = self.backends.pools.get(parsed.model)
            if pool is None or not self.protection.may_use(principal, parsed.model):
                raise model_not_found(parsed.model)
            order = capable_order(pool, capability, what, parsed.route_request)
            parsed.route_request.tenant = principal.tenant
            parsed.route_request.priority = principal.tier
            queued_at = time.perf_counter()
            ticket = await self.protection.admit(
                principal,
                parsed.model,
                parsed.route_request,
                parsed.prompt_estimate,
                request.is_disconnected,
                choices=1,
            )
            ctx.queue_wait = time.perf_counter() - queued_at
        except GatewayError as err:
            return self._fail(ctx, err)
        except ClientDisconnect:
            return self._fail(ctx, client_closed())
        return Admitted(parsed, ctx, ticket, order)

    def _fail(self, ctx: RequestContext, err: GatewayError) -> Response:
        self.recorder.finish(ctx, Outcome.refused(err))
        return error_response(err, ctx.request_id)

    def call(
        self,
        admitted: Admitted[Any],
        invoke: Callable[[Adapter], Awaitable[T]],
        answer: Callable[[T], tuple[Any, Usage]],
    ) -> UnaryCall[T]:
        """The ASGI response that makes the call: `invoke` on each backend in order until
        one answers, then `answer` -> (JSON payload, usage charged to the tenant)."""
        return UnaryCall(self, admitted, invoke, answer)


def capable_order(pool: ModelPool, capability: str, what: str, req: GenerationRequest) -> list[Backend]:
    """The pool's backends that serve `capability`, best first by the model's routing;
    400 naming the model (and its runtimes, never a backend) when none does."""
    capable = [b for b in pool.backends if getattr(b.adapter.capabilities, capability)]
    if not capable:
        runtimes = sorted({b.adapter.runtime for b in pool.backends})
        raise GatewayError(
            400,
            f"The model `{pool.name}` does not serve {what}: its backends ({', '.join(runtimes)}) do not offer it.",
            param="model",
            code="unsupported_by_runtime",
        )
    routed = pool.order(req, capable)
    by_name = {b.name: b for b in capable}
    return [by_name[v.name] for v in routed.candidates] or capable


class UnaryCall(Response, Generic[T]):
    """An ASGI response that makes the call it answers: the backends in order until one
    answers (a backend's failure moves on), then `answer` -> (JSON payload, usage). A
    `Response` so that FastAPI's routes (gateway/openai/api_routes.py) pass it through as they
    pass any response; Response's own body and headers are not used."""

    background = None  # FastAPI attaches its background tasks to a returned Response

    def __init__(
        self,
        gate: UnaryGate,
        admitted: Admitted[Any],
        invoke: Callable[[Adapter], Awaitable[T]],
        answer: Callable[[T], tuple[Any, Usage]],
    ) -> None:
        self.gate = gate
        self.ctx = admitted.ctx
        self.ticket = admitted.ticket
        self.backends = admitted.backends
        self.invoke = invoke
        self.answer = answer
        self.usage: Usage | None = None
        self.backend: str | None = None
        self.error: str | None = None

    async def __call__(self, scope, receive, send) -> None:
        task = asyncio.current_task()
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            task.cancel()  # type: ignore[union-attr]

        watcher = asyncio.create_task(watch())
        status, error, phase = 200, None, None
        gauge = self.gate.recorder.inflight(self.ctx.model or "-")
        gauge.inc()
        try:
            try:
                response = await self._respond()
            finally:
                watcher.cancel()
            status = response.status_code
            error = self.error
            await response(scope, receive, send)
        except asyncio.CancelledError:
            if not gone.is_set():
                raise  # the server is shutting down, not the client leaving
            task.uncancel()  # type: ignore[union-attr]
            status, error, phase = 499, "client disconnected", CancelPhase.NON_STREAMING
        finally:
            gauge.dec()
            release = self.ticket.release(self.usage, phase)
            await (release if phase is None else asyncio.shield(release))
            outcome = Outcome(status, self.usage, self.backend, error, phase)
            self.gate.recorder.finish(self.ctx, outcome)

    async def _respond(self) -> Response:
        headers = {"x-request-id": self.ctx.request_id, **{k: str(v) for k, v in self.ticket.headers.items()}}
        started = time.perf_counter()
        try:
            result = await self._first_answer()
        except GatewayError as err:
            self.error = err.message
            response = error_response(err, self.ctx.request_id)
            response.headers.update(headers)
            return response
        finally:
            self.ctx.upstream_wait += time.perf_counter() - started
        payload, self.usage = self.answer(result)
        return json_response(payload, 200, headers)

    async def _first_answer(self) -> T:
        # Each attempt's outcome goes to the pool's outlier detector as a generation's
        # does (gateway/serving/dispatch.py), so a backend failing embeddings or tokenize calls is
        # ejected too, and an ejected one (half-open: all but its one probe) is skipped.
        # A reload may have dropped the model since admission: its backends still serve
        # this call, with no detector left to tell.
        pool = self.gate.backends.pools.get(self.ctx.model or "")
        last: GatewayError | None = None
        for backend in self.backends:
            if pool is not None and pool.ejection.is_ejected(backend.name):
                continue
            self.backend = backend.name  # the one a client leaving would find at work
            backend.inflight += 1
            try:
                result = await self.invoke(backend.adapter)
            except GatewayError as err:
                if self.gate.on_failure is not None:
                    self.gate.on_failure(backend.name, err)
                if not fails_over(err):
                    if pool is not None:
                        record_outcome(pool, backend.name, None)  # the backend answered: the fault is the request's
                    raise
                if pool is not None:
                    record_outcome(pool, backend.name, failure_kind(err))
                log.warning("backend %s failed a %s call: %s", backend.name, self.ctx.model, err.message)
                last = err
            else:
                if pool is not None:
                    record_outcome(pool, backend.name, None)
                return result
            finally:
                backend.inflight -= 1
        raise last or GatewayError(
            503, "No backend of this model could take the request.", code="no_backend_available", retry_after=1.0
        )
