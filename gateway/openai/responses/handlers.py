"""The operations of `/v1/responses` as plain async functions: the body of a creation
read and its conversation resolved (`prepare_response`, the route's parse: the
generation itself runs on the chat path, gateway/serving/generation.py, with
answer.py's format), and the three that read the store. They take their
collaborators explicitly (the tenant, the store) and return a `JSONResult` the HTTP
layer answers; failures are raised as `GatewayError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.base import GenerationRequest
from gateway.openai.responses.conversation import build_generation
from gateway.openai.responses.errors import not_found, short, unsupported
from gateway.openai.responses.ids import looks_like_response_id, new_response_id
from gateway.openai.responses.listing import list_page, parse_list_query
from gateway.openai.responses.request import ResponsesRequest, parse_request
from gateway.openai.responses.response_object import ResponseShell, new_shell
from gateway.openai.responses.store import ResponseNotFound, ResponseStore, StoredResponse


@dataclass(slots=True)
class JSONResult:
    body: dict[str, Any]
    status: int = 200


@dataclass(slots=True)
class PreparedResponse:
    """A validated request, its conversation resolved: ready for admission and generation."""

    request: ResponsesRequest
    generation: GenerationRequest
    context: list[dict[str, Any]]  # every item before this response's output (what is stored)
    shell: ResponseShell
    tenant: str


async def prepare_response(
    body: Any, *, tenant: str, store: ResponseStore, request_id: str, clock: Callable[[], float] = time.time
) -> PreparedResponse:
    request = parse_request(body)
    history: list[dict[str, Any]] = []
    if request.previous_response_id is not None:
        previous = await _load(store, tenant, request.previous_response_id, "previous_response_id")
        history = previous.conversation()
    generation = build_generation(request, history, request_id=request_id, tenant=tenant or None)
    shell = new_shell(request, new_response_id(), int(clock()))
    return PreparedResponse(request, generation, history + request.input_items, shell, tenant)


async def get_response(
    response_id: str, *, tenant: str, store: ResponseStore, query: Sequence[tuple[str, str]] = ()
) -> JSONResult:
    for name, value in query:
        if name != "stream" or value != "false":
            raise unsupported(
                f"The query parameter {short(name)}={short(value)} is not supported by this gateway.", name
            )
    return JSONResult((await _load(store, tenant, response_id, "response_id")).response)


async def delete_response(response_id: str, *, tenant: str, store: ResponseStore) -> JSONResult:
    if not looks_like_response_id(response_id):
        raise not_found(response_id, "response_id")
    try:
        await store.delete(tenant, response_id)
    except ResponseNotFound:
        raise not_found(response_id, "response_id") from None
    return JSONResult({"id": response_id, "object": "response", "deleted": True})


async def list_input_items(
    response_id: str, *, tenant: str, store: ResponseStore, query: Sequence[tuple[str, str]] = ()
) -> JSONResult:
    list_query = parse_list_query(query)
    record = await _load(store, tenant, response_id, "response_id")
    return JSONResult(list_page(record.context, list_query))


# ---- internals ------------------------------------------------------------------------


async def _load(store: ResponseStore, tenant: str, response_id: str, param: str) -> StoredResponse:
    if not looks_like_response_id(response_id):
        raise not_found(response_id, param)
    try:
        return await store.get(tenant, response_id)
    except ResponseNotFound:
        raise not_found(response_id, param) from None
