"""The four operations of `/v1/responses`, as plain async functions.

They take their collaborators explicitly (the tenant, the store, and for
creation a `Runner` that opens a generation) and return typed results the HTTP
layer turns into responses: `JSONResult` (a status and a JSON body) or
`StreamResult` (server-sent-event bytes). Failures are raised as `GatewayError`
(the gateway's one error envelope). See the package docstring for the wiring.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from adapters.base import Event, GenerationRequest
from adapters.errors import GatewayError
from gateway.openai.responses.conversation import build_generation
from gateway.openai.responses.encoder import ResponseAssembly, ResponseStreamEncoder
from gateway.openai.responses.errors import not_found, response_too_large, short, unsupported
from gateway.openai.responses.ids import looks_like_response_id, new_response_id
from gateway.openai.responses.listing import list_page, parse_list_query
from gateway.openai.responses.request import ResponsesRequest, parse_request
from gateway.openai.responses.response_object import ResponseShell, new_shell
from gateway.openai.responses.store import ResponseNotFound, ResponseStore, StoredResponse

log = logging.getLogger("switchyard.responses")

# Whether the caller may use a model: a stored response made on a model the caller
# may not use answers exactly as a missing one (404), for every read and a
# continuation. The HTTP layer passes the principal's allow-list (`may_use`).
ModelCheck = Callable[[str], bool]


def any_model(model: str) -> bool:
    return True


# Opens a generation and returns its events. Raises GatewayError when it cannot
# start (the client has seen nothing then); closing the events aborts the work.
Runner = Callable[[GenerationRequest], Awaitable[AsyncIterator[Event]]]


@dataclass(slots=True)
class JSONResult:
    body: dict[str, Any]
    status: int = 200


class StreamResult:
    """A `text/event-stream` answer: iterate it to the client. `aclose()` aborts the
    generation, also when iteration never started (e.g. the client left first)."""

    def __init__(self, response_id: str, frames: AsyncGenerator[bytes, None], events: AsyncIterator[Event]) -> None:
        self.response_id = response_id
        self.frames = frames
        self.events = events

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.frames

    async def aclose(self) -> None:
        await self.frames.aclose()
        await _close(self.events)


@dataclass(slots=True)
class PreparedResponse:
    """A validated request, its conversation resolved: ready for admission and `run_response`."""

    request: ResponsesRequest
    generation: GenerationRequest
    context: list[dict[str, Any]]  # every item before this response's output (what is stored)
    shell: ResponseShell
    tenant: str


async def prepare_response(
    body: Any,
    *,
    tenant: str,
    store: ResponseStore,
    request_id: str,
    clock: Callable[[], float] = time.time,
    may_read: ModelCheck = any_model,
) -> PreparedResponse:
    request = parse_request(body)
    history: list[dict[str, Any]] = []
    if request.previous_response_id is not None:
        previous = await _load(store, tenant, request.previous_response_id, "previous_response_id", may_read)
        history = previous.conversation()
    generation = build_generation(request, history, request_id=request_id, tenant=tenant or None)
    shell = new_shell(request, new_response_id(), int(clock()))
    context = history + request.input_items
    if request.store:
        # The record without its output: already over the tenant's share, no output can fit.
        least = len(shell.build_json("completed", [], None)) + len(orjson.dumps(context))
        if least > store.max_record_bytes:
            raise response_too_large(least, store.max_record_bytes)
    return PreparedResponse(request, generation, context, shell, tenant)


async def store_answer(store: ResponseStore, prepared: PreparedResponse, final: dict[str, Any]) -> GatewayError | None:
    """Store a finished response (`store: true`); the error when it could not be.
    A store that fails does not undo the answer: the generation was made and its
    tokens charged, so the client gets it (completed, never `response.failed`),
    a later GET of it answers 404, and the failure is logged here and counted by
    the caller."""
    if not prepared.request.store:
        return None
    try:
        await store.put(prepared.tenant, StoredResponse(final, prepared.context))
    except GatewayError as err:
        log.warning(
            "response %s of tenant %r answered but not stored: %s (%s)", final["id"], prepared.tenant, err.code, err
        )
        return err
    return None


async def run_response(prepared: PreparedResponse, *, run: Runner, store: ResponseStore) -> JSONResult | StreamResult:
    assembly = ResponseAssembly(prepared.shell, logprobs=prepared.request.logprobs)
    events = await run(prepared.generation)
    if prepared.request.stream:
        return StreamResult(prepared.shell.id, _stream(prepared, events, assembly, store), events)
    try:
        await _consume(events, assembly)
    finally:
        await _close(events)
    assembly.end_of_events()
    if assembly.error is not None:
        raise assembly.error
    final = assembly.result()
    await store_answer(store, prepared, final)
    return JSONResult(final)


async def create_response(
    body: Any, *, tenant: str, store: ResponseStore, run: Runner, request_id: str
) -> JSONResult | StreamResult:
    """`POST /v1/responses` in one call (`prepare_response` then `run_response`)."""
    prepared = await prepare_response(body, tenant=tenant, store=store, request_id=request_id)
    return await run_response(prepared, run=run, store=store)


async def get_response(
    response_id: str,
    *,
    tenant: str,
    store: ResponseStore,
    query: Sequence[tuple[str, str]] = (),
    may_read: ModelCheck = any_model,
) -> JSONResult:
    for name, value in query:
        if name != "stream" or value != "false":
            raise unsupported(
                f"The query parameter {short(name)}={short(value)} is not supported by this gateway.", name
            )
    return JSONResult((await _load(store, tenant, response_id, "response_id", may_read)).response)


async def delete_response(
    response_id: str, *, tenant: str, store: ResponseStore, may_read: ModelCheck = any_model
) -> JSONResult:
    if may_read is not any_model:
        await _load(store, tenant, response_id, "response_id", may_read)  # its model, before it goes
    if not looks_like_response_id(response_id):
        raise not_found(response_id, "response_id")
    try:
        await store.delete(tenant, response_id)
    except ResponseNotFound:
        raise not_found(response_id, "response_id") from None
    return JSONResult({"id": response_id, "object": "response", "deleted": True})


async def list_input_items(
    response_id: str,
    *,
    tenant: str,
    store: ResponseStore,
    query: Sequence[tuple[str, str]] = (),
    may_read: ModelCheck = any_model,
) -> JSONResult:
    list_query = parse_list_query(query)
    record = await _load(store, tenant, response_id, "response_id", may_read)
    return JSONResult(list_page(record.context, list_query))


# ---- internals ------------------------------------------------------------------------


async def _load(
    store: ResponseStore, tenant: str, response_id: str, param: str, may_read: ModelCheck
) -> StoredResponse:
    if not looks_like_response_id(response_id):
        raise not_found(response_id, param)
    try:
        record = await store.get(tenant, response_id)
    except ResponseNotFound:
        raise not_found(response_id, param) from None
    if not may_read(str(record.response.get("model", ""))):
        raise not_found(response_id, param)
    return record


async def _until_failed(events: AsyncIterator[Event], assembly: ResponseAssembly) -> AsyncIterator[Event]:
    """`events` until they end or the answer failed; a raised GatewayError fails it."""
    while not assembly.failed:
        try:
            event = await anext(events)
        except StopAsyncIteration:
            return
        except GatewayError as err:
            assembly.fail(err)
            return
        yield event


async def _consume(events: AsyncIterator[Event], assembly: ResponseAssembly) -> None:
    async for event in _until_failed(events, assembly):
        assembly.feed(event)


async def _stream(
    prepared: PreparedResponse, events: AsyncIterator[Event], assembly: ResponseAssembly, store: ResponseStore
) -> AsyncGenerator[bytes, None]:
    encoder = ResponseStreamEncoder(assembly)
    try:
        yield encoder.start()
        async for event in _until_failed(events, assembly):
            frames = encoder.feed(event)
            if frames:
                yield frames
    finally:
        await _close(events)
    assembly.end_of_events()
    final = assembly.result()
    await store_answer(store, prepared, final)
    yield encoder.terminal(final)


async def _close(events: AsyncIterator[Event]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()
