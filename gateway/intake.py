"""The one front door: every API route (chat, completions, Responses, embeddings,
tokenize, detokenize) takes a request through the same steps, in one order, up to
the exchange that answers it.

The request head was bounded before (gateway/http/limits.py, at the protocol). Then:
a trace span, authenticate (first, so an anonymous caller learns nothing from
validation), read the body (its size) and parse it (its depth; the route's own
fields), check the model (one check, one wording: a model the caller may not use
answers exactly as one that does not exist, 404, so models cannot be enumerated),
the deadline the client's timeout sets, the choices limit, the capability a one-shot
call needs, admit (quota and the model's fair queue). What is refused on the way is
recorded once (`Outcome.refused`), so every route's refusals reach the same metrics.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from adapters.base import GenerationRequest, total_choices
from adapters.errors import GatewayError, client_closed, internal_error, model_not_found, unsupported_call
from gateway.backends.backend_set import Backend, BackendSet, ModelPool
from gateway.config.schema import GatewayConfig
from gateway.http.deadline import request_deadline
from gateway.http.envelope import error_response
from gateway.http.request_io import client_request_id, head_fields, new_request_id, read_body
from gateway.observe.context import Outcome, RequestContext
from gateway.observe.recorder import RequestRecorder
from gateway.observe.tracing import Tracing
from gateway.openai.request_fields import refuse_unknown
from gateway.openai.requests import parse_json_body
from gateway.protection.gate import Protection, Ticket
from gateway.serving.dispatch import check_choices
from policies.auth import Principal, credential_headers
from policies.token_bound import requests_token_bound

log = logging.getLogger("switchyard.gateway")


@dataclass
class Intent:
    """What a route read from a body: the requests routing and admission read (a
    one-shot call's stand-in generates nothing, `max_tokens` 0), the route's own
    payload (an answer format, or the one-shot call), and the prompt tokens to reserve
    (None: the requests' upper bound, policies/token_bound.py)."""

    requests: list[GenerationRequest]
    payload: Any = None
    prompt_estimate: int | None = None
    size_units: int = 1  # a one-shot call's size in the tenant's concurrency (Protection.admit)


# A route's body reader: (body, the gateway's request id, the caller) -> its Intent.
# The caller, not only its tenant: a Responses continuation reads a stored response
# only on a model the caller may use.
Parse = Callable[[Any, str, Principal], Awaitable[Intent]]


@dataclass
class Admitted:
    """A request past the front door: its record, what it holds, its model's pool, and
    for a one-shot call the capable backends in routing order."""

    ctx: RequestContext
    ticket: Ticket
    intent: Intent
    pool: ModelPool
    backends: list[Backend] = field(default_factory=list)

    @property
    def requests(self) -> list[GenerationRequest]:
        return self.intent.requests


@dataclass(frozen=True)
class ApiRoute:
    """One API route: its operation's name (the trace's `gen_ai.operation.name`), its
    body reader, what serves it once admitted (an ASGI response), and for a one-shot
    call the capability a backend needs with its name for users."""

    operation: str
    parse: Parse
    serve: Callable[[Admitted], Response]
    capability: tuple[str, str] | None = None


class Intake:
    def __init__(
        self,
        config: Callable[[], GatewayConfig],
        protection: Protection,
        backends: BackendSet,
        recorder: RequestRecorder,
        tracing: Tracing,
        version: Callable[[], str],
    ) -> None:
        self.config = config  # the config in force: a reload replaces it (gateway/lifecycle/reload.py)
        self.protection = protection
        self.backends = backends
        self.recorder = recorder
        self.tracing = tracing
        self.version = version

    async def handle(self, route: ApiRoute, request: Request) -> Response:
        """The route's answer: the exchange that serves it, or the (recorded) refusal."""
        upstream_id = new_request_id()  # the gateway's own id, sent upstream (never the client's)
        head = head_fields(request.scope["headers"])
        ctx = RequestContext(
            request_id=client_request_id(head.get("x-request-id")) or upstream_id,
            started=time.perf_counter(),
            operation=route.operation,
            upstream_id=upstream_id,
            trace=self.tracing.request(request.scope, route.operation),
            config_version=self.version(),
        )
        try:
            admitted = await self._admit(route, request, head, ctx)
        except GatewayError as err:
            return self._refuse(ctx, err)
        except ClientDisconnect:
            return self._refuse(ctx, client_closed())
        except Exception:
            log.exception("unhandled error on %s", request.url.path)
            return self._refuse(ctx, internal_error())
        return route.serve(admitted)

    async def _admit(self, route: ApiRoute, request: Request, head: dict[str, str], ctx: RequestContext) -> Admitted:
        principal = await self.protection.authenticate(credential_headers(request.scope["headers"]))
        ctx.tenant = principal.tenant
        limits = self.config().limits
        raw = await read_body(request, head.get("content-length"), limits.max_body_bytes)
        body = parse_json_body(raw, limits.max_json_depth)
        intent = await route.parse(body, ctx.upstream_id or "", principal)
        reqs = intent.requests
        first = reqs[0]
        ctx.model = first.model
        ctx.trace.parsed(first)
        pool = self.backends.pools.get(first.model)
        if pool is None or not self.protection.may_use(principal, first.model):
            raise model_not_found(first.model)
        refuse_unknown(first.unknown_fields, pool.config.unknown_params)
        check_choices(reqs, limits.max_choices_per_request)
        deadline = request_deadline(head, limits.max_request_timeout_s, stream=first.stream)
        session_id = head.get("x-session-id")
        for r in reqs:
            r.deadline = deadline
            r.tenant = principal.tenant
            r.priority = principal.tier
            r.unsupported_params = pool.config.unsupported_params
            if session_id:
                r.session_keys["x-session-id"] = session_id
        backends = capable_order(pool, *route.capability, first) if route.capability else []
        # The requests' bound is sized only when a quota asks for it (Protection.admit).
        estimate = (
            functools.partial(requests_token_bound, reqs) if intent.prompt_estimate is None else intent.prompt_estimate
        )
        queued_at = time.perf_counter()
        ticket = await self.protection.admit(
            principal,
            first.model,
            first,
            estimate,
            request.is_disconnected,
            choices=total_choices(reqs),
            size_units=intent.size_units,
        )
        ctx.queue_wait = time.perf_counter() - queued_at
        return Admitted(ctx, ticket, intent, pool, backends)

    def _refuse(self, ctx: RequestContext, err: GatewayError) -> Response:
        self.recorder.finish(ctx, Outcome.refused(err))
        return error_response(err, ctx.request_id)


def capable_order(pool: ModelPool, capability: str, what: str, req: GenerationRequest) -> list[Backend]:
    """The pool's backends that serve `capability` (a `Capabilities` field; `what`: its
    name for users), best first by the model's routing; 400 naming the model (and its
    runtimes, never a backend) when none does: nothing is reserved for a call that
    cannot be served."""
    capable = [b for b in pool.backends if getattr(b.adapter.capabilities, capability)]
    if not capable:
        raise unsupported_call(pool.name, what, sorted({b.adapter.runtime for b in pool.backends}))
    routed = pool.order(req, capable)
    by_name = {b.name: b for b in capable}
    return [by_name[v.name] for v in routed.candidates] or capable
