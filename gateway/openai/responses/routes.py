"""The Responses API's HTTP side: its response store, the body reader of
`POST /v1/responses` (the generating path itself is the chat path's, gateway/app.py
and gateway/serving/generation.py), and the three routes that read the store.

Every route authenticates first and scopes the store by the caller's tenant: a
response of another tenant answers exactly as one that does not exist (404).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from adapters.errors import GatewayError
from gateway.config.redis import RedisDeploymentConfig
from gateway.config.response_store import ResponseStoreConfig, resolved_kind
from gateway.config.schema import GatewayConfig, QuotaStoreConfig
from gateway.http.envelope import error_response, json_response
from gateway.intake import Intent
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
from policies.auth import credential_headers

log = logging.getLogger("switchyard.gateway")


def build_response_store(store: ResponseStoreConfig, quota: QuotaStoreConfig) -> ResponseStore:
    """The store `store` describes; `quota`: the quota store's config (kind `auto` follows it)."""
    deployment: RedisDeploymentConfig = quota if store.kind == "auto" else store
    if resolved_kind(store, quota.kind) == "memory":
        return MemoryResponseStore(ttl_s=store.ttl_s, max_entries=store.max_entries, max_bytes=store.max_bytes)
    prefix = store.key_prefix or quota.key_prefix
    return RedisResponseStore(
        deployment.redis_target(), key_prefix=prefix, ttl_s=store.ttl_s, timeout_s=store.timeout_s
    )


class ResponsesRoutes:
    def __init__(self, config: GatewayConfig, protection: Protection) -> None:
        self.store = build_response_store(config.response_store, config.quota_store)
        self.protection = protection

    async def aclose(self) -> None:
        await self.store.aclose()

    async def parse(self, body: Any, upstream_id: str, tenant: str) -> Intent:
        """The body of `POST /v1/responses` -> its chat generation (the previous
        response's conversation resolved, in the tenant's store) and its answer format."""
        prepared = await prepare_response(body, tenant=tenant, store=self.store, request_id=upstream_id)
        return Intent([prepared.generation], ResponsesAnswer(prepared, self.store))

    async def retrieve(self, request: Request) -> Response:
        return await self._read(request, "get")

    async def delete(self, request: Request) -> Response:
        return await self._read(request, "delete")

    async def input_items(self, request: Request) -> Response:
        return await self._read(request, "input_items")

    async def _read(self, request: Request, what: str) -> Response:
        """Authenticated, then admitted as a request of the tenant (`Protection.admit_read`:
        its requests per minute, its concurrency, the bytes sent as its tokens)."""
        try:
            principal = await self.protection.authenticate(credential_headers(request.scope["headers"]))
            ticket = await self.protection.admit_read(principal)
        except GatewayError as err:
            return error_response(err)
        answer: Response | None = None
        try:
            response_id = request.path_params["response_id"]
            query = request.query_params.multi_items()
            result: JSONResult
            if what == "get":
                result = await get_response(response_id, tenant=principal.tenant, store=self.store, query=query)
            elif what == "delete":
                result = await delete_response(response_id, tenant=principal.tenant, store=self.store)
            else:
                result = await list_input_items(response_id, tenant=principal.tenant, store=self.store, query=query)
            answer = json_response(result.body, result.status, ticket.headers or None)
        except GatewayError as err:
            answer = error_response(err)
        finally:
            await ticket.release(stored_read_usage(len(answer.body) if answer is not None else 0))
        return answer
