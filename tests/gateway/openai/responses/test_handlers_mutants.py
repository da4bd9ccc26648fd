"""What a mutation run of gateway/openai/responses/handlers.py left open: every 404 of
a read, a deletion or a continuation names the id it did not find and the param that
carried it (a malformed id, a missing one, one on a model the caller may not use),
a caller limited to some models deletes its own response on an allowed model, and a
query parameter refused names itself and its value."""

from __future__ import annotations

import orjson
import pytest

from adapters.errors import GatewayError
from gateway.openai.responses import (
    MemoryResponseStore,
    StoredResponse,
    delete_response,
    get_response,
    list_input_items,
    prepare_response,
)
from gateway.openai.responses.ids import new_response_id


async def stored(store: MemoryResponseStore, tenant: str = "t", model: str = "m") -> str:
    rid = new_response_id()
    response = {"id": rid, "object": "response", "model": model, "output": []}
    await store.put(tenant, StoredResponse(response, [{"type": "message", "role": "user", "content": "hi"}]))
    return rid


async def not_found(call, rid: str, param: str) -> None:
    with pytest.raises(GatewayError) as info:
        await call
    err = info.value
    assert (err.status, err.code, err.param) == (404, "not_found", param)
    assert err.message == f"Response with id {rid!r} not found."


def only(model: str):
    return lambda m: m == model


async def test_a_caller_limited_to_some_models_deletes_its_own_response():
    store = MemoryResponseStore()
    rid = await stored(store)
    assert (await delete_response(rid, tenant="t", store=store, may_read=only("m"))).body["deleted"] is True
    await not_found(get_response(rid, tenant="t", store=store), rid, "response_id")


@pytest.mark.parametrize("may_read", [None, only("m")], ids=["any model", "some models"])
async def test_every_404_of_a_deletion_names_the_id(may_read):
    store = MemoryResponseStore()
    limited = {} if may_read is None else {"may_read": may_read}
    for rid in ("not-an-id", new_response_id()):  # malformed, then well-formed but missing
        await not_found(delete_response(rid, tenant="t", store=store, **limited), rid, "response_id")
    elsewhere = await stored(store, model="other")
    await not_found(delete_response(elsewhere, tenant="t", store=store, may_read=only("m")), elsewhere, "response_id")


async def test_every_404_of_a_read_names_the_id_and_its_param():
    store = MemoryResponseStore()
    for rid in ("not-an-id", new_response_id()):
        await not_found(get_response(rid, tenant="t", store=store), rid, "response_id")
        await not_found(list_input_items(rid, tenant="t", store=store), rid, "response_id")
        body = {"model": "m", "input": "hi", "previous_response_id": rid}
        await not_found(prepare_response(body, tenant="t", store=store, request_id="r"), rid, "previous_response_id")
    elsewhere = await stored(store, model="other")
    await not_found(get_response(elsewhere, tenant="t", store=store, may_read=only("m")), elsewhere, "response_id")


async def test_a_query_parameter_refused_names_itself_and_its_value():
    store = MemoryResponseStore()
    rid = await stored(store)
    assert (await get_response(rid, tenant="t", store=store, query=[("stream", "false")])).body["id"] == rid
    with pytest.raises(GatewayError) as info:
        await get_response(rid, tenant="t", store=store, query=[("stream", "true")])
    err = info.value
    assert (err.status, err.param, err.code) == (400, "stream", "unsupported_parameter")
    assert err.message == "The query parameter 'stream'='true' is not supported by this gateway."


async def test_the_generation_carries_the_request_id_and_the_tenant_if_named():
    store = MemoryResponseStore()
    body = {"model": "m", "input": "hi"}
    prepared = await prepare_response(body, tenant="t", store=store, request_id="r-1")
    assert (prepared.generation.request_id, prepared.generation.tenant, prepared.tenant) == ("r-1", "t", "t")
    unnamed = await prepare_response(body, tenant="", store=store, request_id="r-2")
    assert (unnamed.generation.request_id, unnamed.generation.tenant) == ("r-2", None)


async def test_a_request_whose_record_cannot_fit_the_share_is_refused_at_its_exact_size():
    """The record without its output: the response object as created plus the context.
    A share of exactly that size takes the request; one byte less refuses it, naming both."""
    body = {"model": "m", "input": "x" * 3000, "instructions": "be brief"}
    prepared = await prepare_response(body, tenant="t", store=MemoryResponseStore(), request_id="r", clock=lambda: 1000)
    least = len(prepared.shell.build_json("completed", [], None)) + len(orjson.dumps(prepared.context))
    assert least > 3000
    fits = MemoryResponseStore(tenant_max_bytes=least)
    await prepare_response(body, tenant="t", store=fits, request_id="r", clock=lambda: 1000)
    with pytest.raises(GatewayError) as info:
        small = MemoryResponseStore(tenant_max_bytes=least - 1)
        await prepare_response(body, tenant="t", store=small, request_id="r", clock=lambda: 1000)
    err = info.value
    assert (err.status, err.code, err.param) == (413, "response_too_large", "store")
    assert f"at least {least} bytes to store, more than the {least - 1} this gateway stores" in err.message
    # store: false is never measured against the share
    await prepare_response({**body, "store": False}, tenant="t", store=small, request_id="r", clock=lambda: 1000)
