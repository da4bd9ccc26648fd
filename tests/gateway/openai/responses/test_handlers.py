"""The handlers without HTTP: creation (whole and streamed), storage, continuation,
retrieval, deletion, input item listing, and tenant isolation."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from adapters.base import ErrorEvent, Finish, TextDelta, ToolCallDelta, Usage
from adapters.errors import GatewayError
from gateway.openai.responses import (
    JSONResult,
    MemoryResponseStore,
    RedisResponseStore,
    StreamResult,
    create_response,
    delete_response,
    get_response,
    list_input_items,
    prepare_response,
)
from tests.gateway.openai.responses.official import sse_events, validate_response
from tests.gateway.openai.responses.scripted import ScriptedRunner
from tests.procs import free_port


def say(text: str, finish: str = "stop") -> list:
    return [TextDelta(0, text), Finish(0, finish), Usage(5, 1)]


CALL = [ToolCallDelta(0, 0, "call_w", "weather", '{"city": "Paris"}'), Finish(0, "tool_calls"), Usage(5, 7)]


async def create(where, runner, tenant="t", **body) -> JSONResult:
    result = await create_response({"model": "m", **body}, tenant=tenant, store=where, run=runner, request_id="r")
    assert isinstance(result, JSONResult)
    validate_response(result.body)
    return result


async def create_stream(where, runner, tenant="t", **body) -> list[dict]:
    result = await create_response(
        {"model": "m", "stream": True, **body}, tenant=tenant, store=where, run=runner, request_id="r"
    )
    assert isinstance(result, StreamResult)
    return sse_events(b"".join([chunk async for chunk in result]))


async def refused(call, status: int) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        await call
    assert info.value.status == status
    return info.value


@pytest.fixture
def store():
    return MemoryResponseStore()


async def test_create_stores_and_get_returns_the_same_object(store):
    runner = ScriptedRunner([say("Paris")])
    created = await create(store, runner, input="capital of France?")
    assert created.body["status"] == "completed" and created.body["output"][0]["content"][0]["text"] == "Paris"
    got = await get_response(created.body["id"], tenant="t", store=store)
    assert got.body == created.body
    assert runner.closed == [True]
    assert runner.requests[0].messages == [{"role": "user", "content": "capital of France?"}]


async def test_store_false_is_not_stored(store):
    created = await create(store, ScriptedRunner([say("x")]), input="q", store=False)
    assert created.body["store"] is False
    err = await refused(get_response(created.body["id"], tenant="t", store=store), 404)
    assert err.code == "not_found"


async def test_continuation_is_previous_context_then_output_then_new_input(store):
    runner = ScriptedRunner([say("Paris"), say("Rome"), say("Berlin")])
    first = await create(store, runner, input="France?", instructions="answer in one word")
    second = await create(store, runner, input="Italy?", previous_response_id=first.body["id"], instructions="be terse")
    assert second.body["previous_response_id"] == first.body["id"]
    assert runner.requests[1].messages == [
        {"role": "system", "content": "be terse"},  # instructions are not carried over
        {"role": "user", "content": "France?"},
        {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "Italy?"},
    ]
    await create(store, runner, input="Germany?", previous_response_id=second.body["id"])
    assert [m["content"] for m in runner.requests[2].messages] == ["France?", "Paris", "Italy?", "Rome", "Germany?"]


async def test_continuation_with_a_tool_result(store):
    runner = ScriptedRunner([CALL, say("It is sunny.")])
    tools = [{"type": "function", "name": "weather", "parameters": {"type": "object"}}]
    first = await create(store, runner, input="Weather in Paris?", tools=tools)
    call = first.body["output"][0]
    assert call["type"] == "function_call" and call["call_id"] == "call_w"
    second = await create(
        store,
        runner,
        tools=tools,
        previous_response_id=first.body["id"],
        input=[{"type": "function_call_output", "call_id": "call_w", "output": "sunny, 24C"}],
    )
    assert second.body["output"][0]["content"][0]["text"] == "It is sunny."
    assert runner.requests[1].messages == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_w", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_w", "content": "sunny, 24C"},
    ]
    # an output for a call the conversation never made is refused
    err = await refused(
        create(
            store,
            runner,
            previous_response_id=first.body["id"],
            input=[{"type": "function_call_output", "call_id": "call_other", "output": "x"}],
        ),
        400,
    )
    assert err.param == "input[0].call_id"


async def test_continuing_without_new_input(store):
    runner = ScriptedRunner([say("one"), say("two")])
    first = await create(store, runner, input="count")
    await create(store, runner, previous_response_id=first.body["id"])
    assert [m["content"] for m in runner.requests[1].messages] == ["count", "one"]


async def test_another_tenants_response_is_404_everywhere(store):
    runner = ScriptedRunner([say("secret")])
    mine = (await create(store, runner, tenant="alice", input="q")).body["id"]
    for call, param in [
        (get_response(mine, tenant="bob", store=store), "response_id"),
        (delete_response(mine, tenant="bob", store=store), "response_id"),
        (list_input_items(mine, tenant="bob", store=store), "response_id"),
        (
            create_response(
                {"model": "m", "previous_response_id": mine}, tenant="bob", store=store, run=runner, request_id="r"
            ),
            "previous_response_id",
        ),
    ]:
        err = await refused(call, 404)
        assert err.code == "not_found" and err.param == param
    assert len(runner.requests) == 1  # bob's continuation never ran
    assert (await get_response(mine, tenant="alice", store=store)).body["id"] == mine


@pytest.mark.parametrize("bad_id", ["", "resp_", "msg_123", "resp_" + "a" * 200, "resp_a/b", "resp_{x}"])
async def test_ids_that_cannot_exist_are_404(store, bad_id):
    for call in (
        get_response(bad_id, tenant="t", store=store),
        delete_response(bad_id, tenant="t", store=store),
        list_input_items(bad_id, tenant="t", store=store),
    ):
        assert (await refused(call, 404)).code == "not_found"


async def test_delete(store):
    rid = (await create(store, ScriptedRunner([say("x")]), input="q")).body["id"]
    deleted = await delete_response(rid, tenant="t", store=store)
    assert deleted.body == {"id": rid, "object": "response", "deleted": True}
    await refused(get_response(rid, tenant="t", store=store), 404)
    await refused(delete_response(rid, tenant="t", store=store), 404)


async def test_get_refuses_what_it_cannot_do(store):
    rid = (await create(store, ScriptedRunner([say("x")]), input="q")).body["id"]
    assert (await get_response(rid, tenant="t", store=store, query=[("stream", "false")])).body["id"] == rid
    for query in ([("stream", "true")], [("include", "message.output_text.logprobs")]):
        err = await refused(get_response(rid, tenant="t", store=store, query=query), 400)
        assert err.param == query[0][0]


async def test_input_items_listing(store):
    runner = ScriptedRunner([say("A1"), say("A2")])
    items = [{"role": "user", "content": f"q{i}"} for i in range(5)]
    first = await create(store, runner, input=items)
    second = await create(store, runner, input="q5", previous_response_id=first.body["id"])
    rid = second.body["id"]

    async def page(**query):
        pairs = [(k, str(v)) for k, v in query.items()]
        return (await list_input_items(rid, tenant="t", store=store, query=pairs)).body

    everything = await page(order="asc", limit=100)
    texts = [i["content"][0]["text"] for i in everything["data"]]
    assert texts == ["q0", "q1", "q2", "q3", "q4", "A1", "q5"]  # context, previous output, new input
    assert everything["object"] == "list" and everything["has_more"] is False
    assert (
        everything["first_id"] == everything["data"][0]["id"] and everything["last_id"] == everything["data"][-1]["id"]
    )
    assert everything["data"][5]["role"] == "assistant" and everything["data"][6]["role"] == "user"

    default = await page()  # desc, 20
    assert [i["id"] for i in default["data"]] == [i["id"] for i in reversed(everything["data"])]

    first_page = await page(order="asc", limit=3)
    assert [i["content"][0]["text"] for i in first_page["data"]] == ["q0", "q1", "q2"]
    assert first_page["has_more"] is True
    second_page = await page(order="asc", limit=3, after=first_page["last_id"])
    assert [i["content"][0]["text"] for i in second_page["data"]] == ["q3", "q4", "A1"]
    last_page = await page(order="asc", limit=3, after=second_page["last_id"])
    assert [i["content"][0]["text"] for i in last_page["data"]] == ["q5"] and last_page["has_more"] is False
    empty = await page(order="asc", after=last_page["last_id"])
    assert empty["data"] == [] and empty["first_id"] is None and empty["has_more"] is False


@pytest.mark.parametrize(
    "query, param",
    [
        ([("limit", "0")], "limit"),
        ([("limit", "101")], "limit"),
        ([("limit", "ten")], "limit"),
        ([("order", "sideways")], "order"),
        ([("after", "msg_nope")], "after"),
        ([("include", "x")], "include"),
        ([("before", "msg_1")], "before"),
    ],
)
async def test_input_items_query_refusals(store, query, param):
    rid = (await create(store, ScriptedRunner([say("x")]), input="q")).body["id"]
    err = await refused(list_input_items(rid, tenant="t", store=store, query=query), 400)
    assert err.param == param


async def test_whole_answer_failures_are_raised_and_not_stored(store):
    runner = ScriptedRunner([[TextDelta(0, "x"), ErrorEvent(GatewayError(503, "gone", code="backend_unavailable"))]])
    err = await refused(create(store, runner, input="q"), 503)
    assert err.code == "backend_unavailable" and runner.closed == [True] and len(store) == 0
    opening = ScriptedRunner([], fail_to_open=GatewayError(404, "no model", code="model_not_found"))
    await refused(create(store, opening, input="q"), 404)
    unfinished = ScriptedRunner([[TextDelta(0, "x")]])
    assert (await refused(create(store, unfinished, input="q"), 502)).code == "upstream_error"


async def test_incomplete_whole_answer_is_200_and_stored(store):
    created = await create(store, ScriptedRunner([say("cut", "length")]), input="q", max_output_tokens=16)
    assert created.status == 200 and created.body["status"] == "incomplete"
    assert created.body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert (await get_response(created.body["id"], tenant="t", store=store)).body["status"] == "incomplete"


async def test_streamed_response_is_stored_before_its_terminal_event(store):
    runner = ScriptedRunner([say("streamed")])
    result = await create_response(
        {"model": "m", "input": "q", "stream": True}, tenant="t", store=store, run=runner, request_id="r"
    )
    seen = b""
    async for chunk in result:
        if b"event: response.completed" in chunk:
            rid = result.response_id
            stored = await get_response(rid, tenant="t", store=store)
            assert stored.body["status"] == "completed"
            assert orjson.loads(chunk.split(b"data: ", 1)[1])["response"] == stored.body
        seen += chunk
    assert sse_events(seen)[-1]["type"] == "response.completed"
    assert runner.closed == [True]


async def test_streamed_failure_is_stored_as_failed(store):
    runner = ScriptedRunner([[TextDelta(0, "par"), GatewayError(502, "upstream broke", code="upstream_error")]])
    evs = await create_stream(store, runner, input="q")
    assert [e["type"] for e in evs[-2:]] == ["error", "response.failed"]
    rid = evs[0]["response"]["id"]
    stored = (await get_response(rid, tenant="t", store=store)).body
    assert stored["status"] == "failed" and stored["error"]["message"] == "upstream broke"
    assert runner.closed == [True]


async def test_a_stream_that_cannot_start_is_an_error_before_any_byte(store):
    runner = ScriptedRunner([], fail_to_open=GatewayError(503, "no backend", code="backend_unavailable"))
    await refused(
        create_response(
            {"model": "m", "input": "q", "stream": True}, tenant="t", store=store, run=runner, request_id="r"
        ),
        503,
    )


async def test_closing_a_stream_aborts_the_generation(store):
    runner = ScriptedRunner([say("never read")])
    result = await create_response(
        {"model": "m", "input": "q", "stream": True}, tenant="t", store=store, run=runner, request_id="r"
    )
    await result.aclose()  # the client left before the first byte
    assert runner.closed == [True] and len(store) == 0

    runner = ScriptedRunner([say("first then wait")], hold=asyncio.Event())
    result = await create_response(
        {"model": "m", "input": "q", "stream": True}, tenant="t", store=store, run=runner, request_id="r"
    )
    frames = aiter(result)
    await anext(frames)  # created + in_progress
    await anext(frames)  # the first text
    await result.aclose()  # the client left mid-stream
    assert runner.closed == [True] and len(store) == 0


async def test_store_failure_delivers_the_answer_without_the_store_s_details(caplog):
    """Finding 9: the answer was generated and charged, so it is delivered (never
    `response.failed`); what went wrong is in the log, never in what the tenant reads."""
    port = free_port()
    dead = RedisResponseStore(f"redis://127.0.0.1:{port}/0", timeout_s=0.5)
    try:
        assert (await create(dead, ScriptedRunner([say("x")]), input="q")).body["status"] == "completed"
        evs = await create_stream(dead, ScriptedRunner([say("x")]), input="q")
        assert evs[-1]["type"] == "response.completed"
        assert str(port) in caplog.text  # the operator's detail, logged
        err = await refused(get_response("resp_abc", tenant="t", store=dead), 503)
        assert err.code == "response_store_unavailable" and str(port) not in err.message
        assert "Error" not in err.message and "127.0.0.1" not in err.message
        # not storing needs no store
        assert (await create(dead, ScriptedRunner([say("x")]), input="q", store=False)).body["status"] == "completed"
        # a continuation cannot be resolved without the store
        await refused(create(dead, ScriptedRunner([say("x")]), input="q", previous_response_id="resp_abc"), 503)
    finally:
        await dead.aclose()


async def test_the_whole_flow_on_redis(redis_server):
    store = RedisResponseStore(redis_server.url)
    try:
        runner = ScriptedRunner([say("Paris"), say("Rome")])
        first = await create(store, runner, tenant="alice", input="France?")
        evs = await create_stream(store, runner, tenant="alice", input="Italy?", previous_response_id=first.body["id"])
        second = evs[-1]["response"]
        assert [m["content"] for m in runner.requests[1].messages] == ["France?", "Paris", "Italy?"]
        assert (await get_response(second["id"], tenant="alice", store=store)).body == second
        await refused(get_response(second["id"], tenant="bob", store=store), 404)
        await refused(list_input_items(second["id"], tenant="bob", store=store), 404)
        await refused(delete_response(second["id"], tenant="bob", store=store), 404)
        listed = await list_input_items(second["id"], tenant="alice", store=store, query=[("order", "asc")])
        assert [i["content"][0]["text"] for i in listed.body["data"]] == ["France?", "Paris", "Italy?"]
        await delete_response(second["id"], tenant="alice", store=store)
        await refused(get_response(second["id"], tenant="alice", store=store), 404)
    finally:
        await store.aclose()


async def test_a_response_on_a_model_the_caller_may_not_use_is_not_there(store):
    """Finding 12 of issue 25: a key limited to `vl` read and continued a response its
    tenant made on `m`. Every read and a continuation answer as for a missing id."""
    made = await create(store, ScriptedRunner([say("secret")]), input="q")
    only_vl = lambda model: model == "vl"  # noqa: E731
    rid = made.body["id"]
    for call in (
        get_response(rid, tenant="t", store=store, may_read=only_vl),
        list_input_items(rid, tenant="t", store=store, may_read=only_vl),
        delete_response(rid, tenant="t", store=store, may_read=only_vl),
        prepare_response(
            {"model": "vl", "input": "q", "previous_response_id": rid},
            tenant="t",
            store=store,
            request_id="r",
            may_read=only_vl,
        ),
    ):
        err = await refused(call, 404)
        assert err.code == "not_found" and rid in err.message
    assert (await get_response(rid, tenant="t", store=store)).body["id"] == rid  # not deleted
