"""The Responses oracles can fail: the strict stream parser (conformance/responses_sse.py)
and the published-schema validator (conformance/openapi.py), on streams and objects
the gateway's own encoder writes (they pass) and on broken ones (each named rule fails)."""

from __future__ import annotations

import asyncio
import json

import pytest

from adapters.base import Finish, TextDelta, ToolCallDelta, Usage
from conformance.openapi import openapi_issues, stream_event_issues
from conformance.responses_sse import parse_responses_stream
from tests.gateway.openai.responses.served import ScriptedModel, http_client, responses_gateway

TEXT = [TextDelta(0, "Hello "), TextDelta(0, "there"), Finish(0, "stop"), Usage(5, 2)]
CALL = [
    ToolCallDelta(0, 0, "call_1", "f", '{"a": '),
    ToolCallDelta(0, 0, None, None, "1}"),
    Finish(0, "tool_calls"),
    Usage(5, 2),
]
TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]


def encoded(script, **body) -> bytes:
    async def run() -> bytes:  # the production route, in process
        async with responses_gateway(ScriptedModel([list(script)])) as gw, http_client(gw) as client:
            answer = await client.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True, **body})
        return answer.content

    return asyncio.run(run())


def frames(raw: bytes) -> list[dict]:
    return [json.loads(b.split("data: ", 1)[1]) for b in raw.decode().split("\n\n") if b]


def reframe(events: list[dict]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


@pytest.mark.parametrize(
    ("script", "body"), [(TEXT, {}), (CALL, {"tools": TOOLS}), (TEXT[:2] + [Finish(0, "length")], {})]
)
def test_the_gateways_streams_break_no_rule_and_every_event_validates(script, body):
    parsed = parse_responses_stream(encoded(script, **body))
    assert parsed.violations == []
    assert parsed.final is not None
    for event in parsed.events:
        assert stream_event_issues(event) == [], event["type"]
    assert openapi_issues(parsed.final, "Response") == []


def test_each_broken_stream_breaks_its_rule():
    events = frames(encoded(TEXT))
    swapped = [events[1], events[0], *events[2:]]
    gap = [*events[:3], {**events[3], "sequence_number": 7}, *events[4:]]
    two_items_open = [*events[:3], {**events[2], "output_index": 1}, *events[3:]]
    delta_before_part = [*events[:3], events[4], events[3], *events[5:]]
    no_terminal = events[:-1]
    cases = {
        "order": [reframe(swapped), reframe(two_items_open), reframe(delta_before_part), reframe(no_terminal)],
        "sequence": [reframe(gap)],
        "no-done": [reframe(events) + b"data: [DONE]\n\n"],
        "event-type": [reframe(events).replace(b"event: response.created", b"event: message", 1)],
        "framing": [reframe(events).replace(b"event: response.in_progress\n", b"", 1), reframe(events)[:-1]],
        "json": [reframe(events).replace(b'data: {"type": "response.created"', b"data: {nope", 1)],
    }
    for rule, bodies in cases.items():
        for body in bodies:
            assert parse_responses_stream(body).rules_broken(rule), (rule, body[:200])


def test_the_schema_refuses_what_openai_does_not_publish():
    final = parse_responses_stream(encoded(TEXT)).final
    assert openapi_issues({**final, "status": "done"}, "Response")[0].path == "$.status"
    assert openapi_issues({**final, "usage": None}, "Response")  # absent or an object, never null
    assert openapi_issues({**final, "user": None}, "Response")
    bad_delta = {"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "sequence_number": 1}
    assert stream_event_issues(bad_delta)  # no content_index, delta, logprobs
    assert stream_event_issues({"type": "response.madeup", "sequence_number": 0})[0].path == "$.type"
    embedding = {
        "object": "list",
        "model": "e",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}],
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    }
    assert openapi_issues(embedding, "CreateEmbeddingResponse") == []
    assert openapi_issues({**embedding, "data": [{"index": 0, "embedding": "AAAA"}]}, "CreateEmbeddingResponse")
