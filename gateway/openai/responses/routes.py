"""The Responses API's HTTP side: its response store, the body reader of
`POST /v1/responses` (the generating path itself is the chat path's, gateway/app.py
and gateway/serving/generation.py), and the three routes that read the store.

Every route authenticates first and scopes the store by the caller's tenant: a
response of another tenant answers exactly as one that does not exist (404).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from starlette.requests import Request
from starlette.responses import Response

from adapters.errors import GatewayError
from gateway.config.redis import RedisDeploymentConfig
from gateway.config.response_store import ResponseStoreConfig, resolved_kind
from gateway.config.schema import GatewayConfig, QuotaStoreConfig
from gateway.http.envelope import error_response, json_response
from gateway.http.request_io import client_request_id, new_request_id
from gateway.intake import Intent
from gateway.observe.context import Outcome, RequestContext
from gateway.observe.recorder import RequestRecorder
from gateway.observe.tracing import NoTracing, Tracing
from gateway.openai.responses import (
    MemoryResponseStore,
    RedisResponseStore,
    ResponseStore,
    delete_response,
    get_response,
    list_input_items,
    prepare_response,
)
from gateway.openai.responses.answer import ResponsesAnswer
from gateway.openai.responses.handlers import JSONResult
from gateway.protection.gate import Protection, stored_read_usage
from policies.auth import Principal, credential_headers

log = logging.getLogger("switchyard.gateway")


def build_response_store(store: ResponseStoreConfig, quota: QuotaStoreConfig) -> ResponseStore:
    """The store `store` describes; `quota`: the quota store's config (kind `auto` follows it)."""
    deployment: RedisDeploymentConfig = quota if store.kind == "auto" else store
    entries, size = store.tenant_max_entries, store.tenant_max_bytes
    if resolved_kind(store, quota.kind) == "memory":
        return MemoryResponseStore(
            ttl_s=store.ttl_s,
            max_entries=store.max_entries,
            max_bytes=store.max_bytes,
            tenant_max_entries=entries,
            tenant_max_bytes=size,
        )
    return RedisResponseStore(
        deployment.redis_target(),
        key_prefix=store.key_prefix or quota.key_prefix,
        ttl_s=store.ttl_s,
        timeout_s=store.timeout_s,
        tenant_max_entries=entries,
        tenant_max_bytes=size,
    )


class ResponsesRoutes:
    """`registry`: where the store's own counters go; `recorder`: where the reads of the
    store are written down like every request (metrics per tenant, the access log);
    `tracing`: the gateway's one tracing, which traces each read like every request."""

    def __init__(
        self,
        config: GatewayConfig,
        protection: Protection,
        registry: CollectorRegistry | None = None,
        recorder: RequestRecorder | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.store = build_response_store(config.response_store, config.quota_store)
        self.protection = protection
        self.recorder = recorder
        self.tracing = tracing or NoTracing()
        self.not_stored = Counter(
            "switchyard_responses_not_stored_total",
            "Responses answered with store: true that could not be stored (delivered all the same), by error code.",
            ["reason"],
            registry=registry if registry is not None else CollectorRegistry(),
        )

    async def aclose(self) -> None:
        await self.store.aclose()

    async def parse(self, body: Any, upstream_id: str, principal: Principal) -> Intent:
        """The body of `POST /v1/responses` -> its chat generation (the previous
        response's conversation resolved, in the tenant's store, on a model the
        principal may use) and its answer format."""
        prepared = await prepare_response(
            body,
            tenant=principal.tenant,
            store=self.store,
            request_id=upstream_id,
            may_read=self._models_of(principal),
        )
        return Intent([prepared.generation], ResponsesAnswer(prepared, self.store, self._count_not_stored))

    def _models_of(self, principal: Principal) -> Callable[[str], bool]:
        """A response made on a model `principal` may not use is, to it, not there (404)."""
        return lambda model: self.protection.may_use(principal, model)

    def _count_not_stored(self, reason: str) -> None:
        self.not_stored.labels(reason).inc()

    async def retrieve(self, request: Request) -> Response:
        return await self._read(request, "get")

    async def delete(self, request: Request) -> Response:
        return await self._read(request, "delete")

    async def input_items(self, request: Request) -> Response:
        return await self._read(request, "input_items")

    async def _read(self, request: Request, what: str) -> Response:
        """Authenticated, then admitted as a request of the tenant (`Protection.admit_read`:
        its requests per minute, its concurrency, the bytes sent as its tokens), and
        recorded and traced as one (metrics, an access-log line, a trace whose server span
        is named `responses.{what}`; the recorder ends it)."""
        request_id = new_request_id()
        operation = f"responses.{what}"
        ctx = RequestContext(
            request_id=client_request_id(request.headers.get("x-request-id")) or request_id,
            started=time.perf_counter(),
            operation=operation,
            upstream_id=request_id,
            trace=self.tracing.request(request.scope, operation),
        )
        try:
            principal = await self.protection.authenticate(credential_headers(request.scope["headers"]))
            ctx.tenant = principal.tenant
            ticket = await self.protection.admit_read(principal)
        except GatewayError as err:
            self._record(ctx, Outcome.refused(err))
            return error_response(err, ctx.request_id)
        answer: Response | None = None
        failure: GatewayError | None = None
        try:
            response_id = request.path_params["response_id"]
            query = request.query_params.multi_items()
            tenant, store, may_read = principal.tenant, self.store, self._models_of(principal)
            result: JSONResult
            if what == "get":
                result = await get_response(response_id, tenant=tenant, store=store, query=query, may_read=may_read)
            elif what == "delete":
                result = await delete_response(response_id, tenant=tenant, store=store, may_read=may_read)
            else:
                result = await list_input_items(response_id, tenant=tenant, store=store, query=query, may_read=may_read)
            answer = json_response(result.body, result.status, ticket.headers or None)
        except GatewayError as err:
            failure = err
            answer = error_response(err, ctx.request_id)
        finally:
            usage = stored_read_usage(len(answer.body) if answer is not None else 0)
            await ticket.release(usage)
            status = answer.status_code if answer is not None else 500
            self._record(ctx, Outcome(status, usage, error=failure.message if failure else None))
        return answer

    def _record(self, ctx: RequestContext, outcome: Outcome) -> None:
        if self.recorder is not None:
            self.recorder.finish(ctx, outcome)  # ends the trace too
        else:
            ctx.trace.finish(ctx, outcome)
