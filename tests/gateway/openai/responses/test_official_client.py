"""The official `openai` client (strict validation) against the production Responses
route, in process (tests/gateway/openai/responses/served.py): `responses.create`, the `responses.stream`
helper and its accumulated final response, `parse` with a pydantic text format,
tool calls, failures, retrieve, delete, and the paginated input item list. The
API key names the tenant."""

from __future__ import annotations

import re

import openai
import pydantic
import pytest
from openai.types.responses import ResponseErrorEvent, ResponseFailedEvent

from adapters.base import ErrorEvent, Finish, TextDelta, ToolCallDelta, Usage
from adapters.errors import GatewayError
from tests.gateway.openai.responses.served import ScriptedModel, http_client, official, responses_gateway


def say(text: str, finish: str = "stop") -> list:
    return [TextDelta(0, text[: len(text) // 2]), TextDelta(0, text[len(text) // 2 :]), Finish(0, finish), Usage(9, 4)]


WEATHER = {
    "type": "function",
    "name": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}
CALL = [
    ToolCallDelta(0, 0, "call_1", "weather", '{"city": '),
    ToolCallDelta(0, 0, None, None, '"Paris"}'),
    Finish(0, "tool_calls"),
    Usage(20, 9),
]


async def test_create_text():
    model = ScriptedModel([say("Hello there")])
    async with responses_gateway(model) as gw:
        r = await official(gw).responses.create(model="m", input="hi", instructions="be nice", metadata={"k": "v"})
        assert r.output_text == "Hello there" and r.status == "completed" and r.id.startswith("resp_")
        assert r.usage.input_tokens == 9 and r.usage.output_tokens == 4 and r.usage.total_tokens == 13
        assert r.instructions == "be nice" and r.metadata == {"k": "v"}


async def test_stream_helper_text():
    model = ScriptedModel([say("Hello there")])
    async with responses_gateway(model) as gw:
        async with official(gw).responses.stream(model="m", input="hi") as stream:
            seen = [event async for event in stream]
            final = await stream.get_final_response()
        deltas = [e for e in seen if e.type == "response.output_text.delta"]
        assert "".join(d.delta for d in deltas) == "Hello there"
        assert deltas[-1].snapshot == "Hello there"  # the helper accumulated our deltas
        assert [e.sequence_number for e in seen] == list(range(len(seen)))
        assert final.output_text == "Hello there" and final.status == "completed"
        async with http_client(gw) as raw:
            body = (await raw.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})).content
        assert b"[DONE]" not in body and body.endswith(b"\n\n")


async def test_stream_helper_tool_call():
    model = ScriptedModel([CALL])
    async with responses_gateway(model) as gw:
        async with official(gw).responses.stream(model="m", input="weather in Paris?", tools=[WEATHER]) as stream:
            seen = [event async for event in stream]
            final = await stream.get_final_response()
        argument_deltas = [e for e in seen if e.type == "response.function_call_arguments.delta"]
        assert argument_deltas[-1].snapshot == '{"city": "Paris"}'
        call = final.output[0]
        assert (
            call.type == "function_call" and call.name == "weather" and re.fullmatch(r"call_[0-9a-f]{24}", call.call_id)
        )
        assert call.arguments == '{"city": "Paris"}'
        assert call.parsed_arguments == {"city": "Paris"}  # the helper parses strict tools' arguments
        sent = model.requests[0]
        assert sent.tools == [
            {
                "type": "function",
                "function": {"name": "weather", "parameters": WEATHER["parameters"], "strict": True},
            }
        ]


class Capital(pydantic.BaseModel):
    country: str
    capital: str


async def test_json_schema_output_parsed_by_the_client():
    answer = '{"country": "France", "capital": "Paris"}'
    model = ScriptedModel([say(answer), say(answer)])
    async with responses_gateway(model) as gw:
        async with official(gw).responses.stream(model="m", input="France?", text_format=Capital) as stream:
            final = await stream.get_final_response()
        assert final.output_parsed == Capital(country="France", capital="Paris")
        sent = model.requests[0].response_format
        assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "Capital"
        assert sent["json_schema"]["strict"] is True and sent["json_schema"]["schema"]["required"] == [
            "country",
            "capital",
        ]
        parsed = await official(gw).responses.parse(model="m", input="France?", text_format=Capital)
        assert parsed.output_parsed == Capital(country="France", capital="Paris")


async def test_failure_mid_stream_reaches_the_client_as_error_then_failed():
    script = [TextDelta(0, "par"), ErrorEvent(GatewayError(503, "backend went away", code="backend_unavailable"))]
    model = ScriptedModel([script, script])
    async with responses_gateway(model) as gw:
        events = [e async for e in await official(gw).responses.create(model="m", input="hi", stream=True)]
        assert isinstance(events[-2], ResponseErrorEvent) and "backend went away" in events[-2].message
        assert isinstance(events[-1], ResponseFailedEvent)
        assert events[-1].response.status == "failed" and events[-1].response.error.code == "server_error"
        async with official(gw).responses.stream(model="m", input="hi") as stream:
            with pytest.raises(RuntimeError, match="response.completed"):
                await stream.get_final_response()


async def test_incomplete_stream():
    model = ScriptedModel([say("cut short", "length")])
    async with responses_gateway(model) as gw:
        events = [
            e
            async for e in await official(gw).responses.create(model="m", input="hi", stream=True, max_output_tokens=16)
        ]
        assert events[-1].type == "response.incomplete"
        assert events[-1].response.incomplete_details.reason == "max_output_tokens"


async def test_retrieve_continue_list_and_delete():
    model = ScriptedModel([say("Paris"), say("Rome")])
    async with responses_gateway(model) as gw:
        alice = official(gw)
        first = await alice.responses.create(model="m", input="France?")
        second = await alice.responses.create(model="m", input="Italy?", previous_response_id=first.id)
        assert [m["content"] for m in model.requests[1].messages] == ["France?", "Paris", "Italy?"]
        assert (await alice.responses.retrieve(second.id)).output_text == "Rome"
        items = [item async for item in alice.responses.input_items.list(second.id, limit=1, order="asc")]
        assert [(i.type, i.role) for i in items] == [("message", "user"), ("message", "assistant"), ("message", "user")]
        assert items[1].content[0].text == "Paris"
        newest_first = await alice.responses.input_items.list(second.id)
        assert newest_first.data[0].content[0].text == "Italy?" and newest_first.has_more is False
        await alice.responses.delete(second.id)
        with pytest.raises(openai.NotFoundError):
            await alice.responses.retrieve(second.id)


async def test_another_tenant_gets_not_found_everywhere():
    model = ScriptedModel([say("secret")])
    async with responses_gateway(model) as gw:
        mine = await official(gw, "alice").responses.create(model="m", input="q")
        bob = official(gw, "bob")
        for call in (
            bob.responses.retrieve(mine.id),
            bob.responses.delete(mine.id),
            bob.responses.input_items.list(mine.id),
            bob.responses.create(model="m", input="more", previous_response_id=mine.id),
        ):
            with pytest.raises(openai.NotFoundError) as info:
                await call
            assert info.value.code == "not_found"


async def test_refusals_reach_the_client_with_their_param():
    model = ScriptedModel([say("x")])
    async with responses_gateway(model) as gw:
        with pytest.raises(openai.BadRequestError) as info:
            await official(gw).responses.create(model="m", input="hi", tools=[{"type": "web_search"}])
        assert info.value.param == "tools[0].type" and info.value.code == "unsupported_parameter"
        assert model.requests == []
