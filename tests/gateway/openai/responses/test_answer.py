"""`ResponsesAnswer`, the Responses API's answer format on the gateway's generation
path: the stream and the whole answer agree for every kind of event sequence
(including the short text path and what falls off it: logprobs, a message after a
tool call, an error), the finished response is stored before the terminal event,
and a store that fails turns a stream's end into `response.failed`."""

from __future__ import annotations

import asyncio
import json

import pytest

from adapters.base import ErrorEvent, Finish, TextDelta, TokenLogprob, ToolCallDelta, Usage
from adapters.errors import GatewayError
from conformance.responses_sse import parse_responses_stream
from gateway.openai.responses import MemoryResponseStore, ResponseNotFound, prepare_response
from gateway.openai.responses.answer import ResponsesAnswer

TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
LP = [TokenLogprob("b", -0.5, None, [])]
SCRIPTS = {
    "text": [TextDelta(0, "a"), TextDelta(0, "b"), TextDelta(0, "c"), Finish(0, "stop"), Usage(3, 3)],
    "cut": [TextDelta(0, "a"), TextDelta(0, "b"), Finish(0, "length"), Usage(3, 2)],
    "call then text": [
        ToolCallDelta(0, 0, "call_1", "f", '{"x": '),
        ToolCallDelta(0, 0, None, None, "1}"),
        TextDelta(0, "after"),
        TextDelta(0, " the call"),
        Finish(0, "stop"),
    ],
    "logprobs": [TextDelta(0, "a"), TextDelta(0, "b", LP), Finish(0, "stop")],
}


class FailingStore(MemoryResponseStore):
    async def put(self, tenant, record) -> None:
        raise GatewayError(503, "The response store is unavailable.", code="response_store_unavailable")


async def answer(where, stream: bool, **body) -> ResponsesAnswer:
    """`where`: the response store; `body`: more request fields."""
    request = {"model": "m", "input": "hi", "stream": stream, **body}
    prepared = await prepare_response(request, tenant="t", store=where, request_id="r")
    return ResponsesAnswer(prepared, where)


def strip(response: dict) -> dict:
    out = {k: v for k, v in response.items() if k not in ("id", "created_at", "completed_at")}
    out["output"] = [{k: v for k, v in item.items() if k != "id"} for item in response["output"]]
    return out


@pytest.mark.parametrize("name", SCRIPTS)
async def test_stream_and_whole_agree(name):
    body = {"tools": TOOLS} if "call" in name else {}
    if name == "logprobs":
        body["include"] = ["message.output_text.logprobs"]
    store = MemoryResponseStore()
    whole = await answer(store, False, **body)
    for event in SCRIPTS[name]:
        whole.whole_feed(event)
    final_whole = await whole.whole_body(Usage(3, 3))
    streamed = await answer(store, True, **body)
    raw = streamed.stream_start() + b"".join(streamed.stream_feed(e) for e in SCRIPTS[name])
    raw += await streamed.stream_end(Usage(3, 3))
    parsed = parse_responses_stream(raw)
    assert parsed.violations == []
    assert parsed.final is not None and strip(parsed.final) == strip(final_whole)
    deltas = "".join(e["delta"] for e in parsed.events if e["type"] == "response.output_text.delta")
    assert deltas == "".join(e.text for e in SCRIPTS[name] if isinstance(e, TextDelta))
    # Both were stored as answered.
    assert (await store.get("t", final_whole["id"])).response == final_whole
    assert (await store.get("t", parsed.final["id"])).response == parsed.final


async def test_message_after_a_call_is_a_new_item():
    whole = await answer(MemoryResponseStore(), False, tools=TOOLS)
    for event in SCRIPTS["call then text"]:
        whole.whole_feed(event)
    final = await whole.whole_body(Usage(1, 1))
    assert [i["type"] for i in final["output"]] == ["function_call", "message"]
    assert json.loads(final["output"][0]["arguments"]) == {"x": 1}
    assert final["output"][1]["content"][0]["text"] == "after the call"


async def test_an_error_fails_both_forms():
    err = GatewayError(502, "The backend broke.", code="upstream_error")
    whole = await answer(MemoryResponseStore(), False)
    whole.whole_feed(TextDelta(0, "a"))
    with pytest.raises(GatewayError):
        whole.whole_feed(ErrorEvent(err))
    store = MemoryResponseStore()
    streamed = await answer(store, True)
    raw = streamed.stream_start() + streamed.stream_feed(TextDelta(0, "a")) + streamed.stream_feed(ErrorEvent(err))
    parsed = parse_responses_stream(raw + await streamed.stream_end(Usage(3, 3)))
    assert parsed.kinds[-2:] == ["error", "response.failed"] and parsed.final["status"] == "failed"


async def test_a_failing_store_delivers_the_answer_and_counts_it():
    """The generation was made and charged: the client gets it completed (never
    `response.failed` after its tokens), and the failure is counted."""
    counted: list[str] = []
    prepared = await prepare_response(
        {"model": "m", "input": "hi", "stream": True}, tenant="t", store=FailingStore(), request_id="r"
    )
    streamed = ResponsesAnswer(prepared, FailingStore(), counted.append)
    raw = streamed.stream_start() + b"".join(streamed.stream_feed(e) for e in SCRIPTS["text"])
    parsed = parse_responses_stream(raw + await streamed.stream_end(Usage(3, 3)))
    assert parsed.kinds[-1] == "response.completed" and parsed.final["status"] == "completed"
    prepared = await prepare_response({"model": "m", "input": "hi"}, tenant="t", store=FailingStore(), request_id="r")
    whole = ResponsesAnswer(prepared, FailingStore(), counted.append)
    for event in SCRIPTS["text"]:
        whole.whole_feed(event)
    assert (await whole.whole_body(Usage(1, 1)))["status"] == "completed"
    assert counted == ["response_store_unavailable", "response_store_unavailable"]


async def test_store_false_stores_nothing():
    store = MemoryResponseStore()
    whole = await answer(store, False, store=False)
    for event in SCRIPTS["text"]:
        whole.whole_feed(event)
    final = await whole.whole_body(Usage(1, 1))
    with pytest.raises(ResponseNotFound):
        await store.get("t", final["id"])


async def test_the_opening_frames_are_built_while_the_request_waits_and_sent_once():
    streamed = await answer(MemoryResponseStore(), True)
    assert streamed.opening is None
    await asyncio.sleep(0)  # the loop's next turn: where the request would wait on its upstream
    built = streamed.opening
    assert built is not None and parse_responses_stream(built).kinds == ["response.created", "response.in_progress"]
    raw = streamed.stream_start() + b"".join(streamed.stream_feed(e) for e in SCRIPTS["text"])
    parsed = parse_responses_stream(raw + await streamed.stream_end(Usage(3, 3)))
    assert raw.startswith(built) and parsed.violations == []  # once, and numbered 0 and 1
    # A whole answer sends no stream frames: nothing is built for it.
    whole = await answer(MemoryResponseStore(), False)
    await asyncio.sleep(0)
    assert whole.opening is None
