"""The Responses encoder on scripted event sequences: event order, sequence numbers,
item ids and indices, terminal events, and every payload validated with the
official `openai` models."""

from __future__ import annotations

from adapters.base import ErrorEvent, Finish, LogprobsDelta, TextDelta, TokenLogprob, ToolCallDelta, TopLogprob, Usage
from adapters.errors import GatewayError
from gateway.openai.responses.encoder import ResponseAssembly, ResponseStreamEncoder
from gateway.openai.responses.request import parse_request
from gateway.openai.responses.response_object import new_shell
from tests.gateway.openai.responses.official import message_item_events, sse_events, validate_response

NOW = 1_700_000_000


def assembly(**body) -> ResponseAssembly:
    request = parse_request({"model": "m", "input": "hi", **body})
    return ResponseAssembly(new_shell(request, "resp_test", NOW), logprobs=request.logprobs, clock=lambda: NOW + 5)


def stream(events, **body) -> list[dict]:
    asm = assembly(**body)
    enc = ResponseStreamEncoder(asm)
    raw = enc.start() + b"".join(enc.feed(e) for e in events)
    raw += enc.terminal(asm.result())
    return sse_events(raw)


def whole(events, **body) -> dict:
    asm = assembly(**body)
    for e in events:
        asm.feed(e)
    return asm.result()


def types(evs) -> list[str]:
    return [e["type"] for e in evs]


TEXT = [TextDelta(0, "Hel"), TextDelta(0, "lo"), Finish(0, "stop"), Usage(7, 2)]
# A text answer's events up to its first delta.
TEXT_OPENING = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
]


def test_text_stream_order_and_sequence_numbers():
    evs = stream(TEXT)
    assert types(evs) == ["response.created", "response.in_progress", *message_item_events(2), "response.completed"]
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    item_id = evs[2]["item"]["id"]
    assert item_id.startswith("msg_")
    for e in evs[3:9]:
        assert e["output_index"] == 0
        if e["type"] != "response.output_item.done":
            assert e["item_id"] == item_id and e["content_index"] == 0
    assert evs[2]["item"]["status"] == "in_progress" and evs[2]["item"]["content"] == []
    assert evs[6]["text"] == "Hello" and evs[7]["part"]["text"] == "Hello"
    assert evs[8]["item"]["status"] == "completed"
    done = evs[-1]["response"]
    assert done["status"] == "completed" and done["output"] == [evs[8]["item"]]
    assert done["usage"]["input_tokens"] == 7 and done["usage"]["output_tokens"] == 2


def test_created_and_in_progress_carry_the_response_in_progress():
    evs = stream(TEXT, instructions="be brief", metadata={"k": "v"})
    for e in evs[:2]:
        r = validate_response(e["response"])
        assert r.status == "in_progress" and r.output == [] and r.usage is None
        assert r.id == "resp_test" and r.instructions == "be brief" and r.metadata == {"k": "v"}


def test_whole_response_validates_with_every_echoed_field():
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    obj = whole(
        TEXT,
        tools=tools,
        tool_choice="required",
        temperature=0.2,
        top_p=0.5,
        max_output_tokens=64,
        metadata={"a": "b"},
        user="u",
        store=False,
        previous_response_id="resp_prev",
        parallel_tool_calls=False,
        text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": True}},
    )
    r = validate_response(obj)
    assert r.object == "response" and r.id == "resp_test" and r.created_at == NOW and r.completed_at == NOW + 5
    assert r.status == "completed" and r.error is None and r.incomplete_details is None
    assert r.output_text == "Hello" and r.model == "m"
    assert r.tools[0].name == "f" and r.tool_choice == "required" and r.parallel_tool_calls is False
    assert r.temperature == 0.2 and r.top_p == 0.5 and r.max_output_tokens == 64
    assert r.metadata == {"a": "b"} and r.user == "u" and r.store is False and r.previous_response_id == "resp_prev"
    assert r.text.format.type == "json_schema"
    assert r.usage.total_tokens == 9 and r.usage.input_tokens_details.cached_tokens == 0
    assert r.usage.output_tokens_details.reasoning_tokens == 0


def test_unset_sampling_is_echoed_as_the_defaults_used_and_cached_tokens_are_reported():
    obj = whole([TextDelta(0, "x"), Finish(0, "stop"), Usage(10, 1, cached_tokens=8)])
    assert obj["temperature"] == 1.0 and obj["top_p"] == 1.0 and obj["max_output_tokens"] is None
    assert obj["usage"]["input_tokens_details"]["cached_tokens"] == 8


def test_usage_unknown_is_null():
    r = validate_response(whole([TextDelta(0, "x"), Finish(0, "stop")]))
    assert r.usage is None and r.status == "completed"


TOOLS = {"tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}]}


def test_text_then_tool_call_items_in_order_one_at_a_time():
    events = [
        TextDelta(0, "let me check"),
        ToolCallDelta(0, 0, "call_a", "f", '{"x"'),
        ToolCallDelta(0, 0, "call_a", "f", ": 1}"),
        Finish(0, "tool_calls"),
        Usage(3, 4),
    ]
    evs = stream(events, **TOOLS)
    assert types(evs)[2:] == [
        *message_item_events(),
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = evs[8]
    assert added["output_index"] == 1 and added["item"]["type"] == "function_call"
    assert added["item"]["call_id"] == "call_a" and added["item"]["name"] == "f" and added["item"]["arguments"] == ""
    fc_id = added["item"]["id"]
    assert fc_id.startswith("fc_")
    deltas = [e for e in evs if e["type"] == "response.function_call_arguments.delta"]
    assert all(d["item_id"] == fc_id and d["output_index"] == 1 for d in deltas)
    assert "".join(d["delta"] for d in deltas) == '{"x": 1}'
    args_done = evs[11]
    assert args_done["arguments"] == '{"x": 1}' and args_done["name"] == "f" and args_done["item_id"] == fc_id
    final = validate_response(evs[-1]["response"])
    assert [o.type for o in final.output] == ["message", "function_call"]
    assert final.output[1].arguments == '{"x": 1}' and final.output[1].status == "completed"


def test_parallel_calls_are_consecutive_items():
    events = [
        ToolCallDelta(0, 0, "call_a", "f", "{}"),  # the stream guard gives each call its id
        ToolCallDelta(0, 1, "call_b", "g", '{"y": 2}'),
        Finish(0, "tool_calls"),
    ]
    evs = stream(events, **TOOLS)
    items = [e["item"] for e in evs if e["type"] == "response.output_item.done"]
    assert [(i["name"], i["arguments"]) for i in items] == [("f", "{}"), ("g", '{"y": 2}')]
    assert all(i["call_id"].startswith("call_") for i in items) and items[0]["call_id"] != items[1]["call_id"]
    order = [(e["type"], e.get("output_index")) for e in evs if "output_item" in e["type"]]
    assert order == [
        ("response.output_item.added", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.output_item.done", 1),
    ]


def test_a_call_is_announced_once_its_name_is_known():
    events = [ToolCallDelta(0, 0, "call_a", None, '{"a"'), ToolCallDelta(0, 0, None, "f", ": 1}"), Finish(0, "stop")]
    evs = stream(events, **TOOLS)
    assert types(evs)[2:5] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
    ]
    assert evs[2]["item"]["name"] == "f"
    assert evs[3]["delta"] == '{"a": 1}'


def test_more_of_a_finished_call_fails_the_response():
    events = [
        ToolCallDelta(0, 0, None, "f", "{}"),
        ToolCallDelta(0, 1, None, "g", "{}"),
        ToolCallDelta(0, 0, None, None, "more"),
        Finish(0, "tool_calls"),
    ]
    evs = stream(events, **TOOLS)
    assert types(evs)[-2:] == ["error", "response.failed"]
    assert evs[-2]["code"] == "upstream_error"
    failed = validate_response(evs[-1]["response"])
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert [o.status for o in failed.output] == ["completed", "incomplete"]


def test_length_finish_is_incomplete_with_the_cut_item_incomplete():
    evs = stream([TextDelta(0, "a long"), Finish(0, "length"), Usage(3, 16)], max_output_tokens=16)
    assert types(evs)[-1] == "response.incomplete"
    assert "response.completed" not in types(evs)
    r = validate_response(evs[-1]["response"])
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.completed_at is None and r.output[0].status == "incomplete" and r.output_text == "a long"
    item_done = [e for e in evs if e["type"] == "response.output_item.done"][0]
    assert item_done["item"]["status"] == "incomplete"


def test_length_inside_a_tool_call_leaves_the_call_incomplete():
    obj = whole([ToolCallDelta(0, 0, None, "f", '{"a": '), Finish(0, "length")], **TOOLS)
    r = validate_response(obj)
    assert r.status == "incomplete" and r.output[0].status == "incomplete" and r.output[0].arguments == '{"a": '


def test_content_filter_is_incomplete_with_its_reason():
    r = validate_response(whole([TextDelta(0, "x"), Finish(0, "content_filter")]))
    assert r.status == "incomplete" and r.incomplete_details.reason == "content_filter"


def test_error_mid_stream_is_an_error_event_then_response_failed():
    err = GatewayError(503, "backend went away", code="backend_unavailable")
    events = [TextDelta(0, "par"), ErrorEvent(err), TextDelta(0, "never"), Finish(0, "stop")]
    evs = stream(events)
    assert types(evs) == [*TEXT_OPENING, "error", "response.failed"]
    assert evs[5]["code"] == "backend_unavailable" and evs[5]["message"] == "backend went away"
    assert evs[5]["param"] is None
    r = validate_response(evs[6]["response"])
    assert r.status == "failed" and r.error.code == "server_error" and r.error.message == "backend went away"
    assert r.output_text == "par" and r.output[0].status == "incomplete"
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))


def test_rate_limit_mid_stream_maps_to_its_code():
    evs = stream([ErrorEvent(GatewayError(429, "slow down", code="rate_limited"))])
    assert evs[-2] == {
        "type": "error",
        "code": "rate_limited",
        "message": "slow down",
        "param": None,
        "sequence_number": 2,
    }
    assert evs[-1]["response"]["error"] == {"code": "rate_limit_exceeded", "message": "slow down"}


def test_nothing_follows_the_finish_and_other_choices_are_ignored():
    obj = whole([TextDelta(1, "other"), TextDelta(0, "a"), Finish(0, "stop"), TextDelta(0, "late"), Usage(1, 1)])
    assert validate_response(obj).output_text == "a"


def test_whole_and_stream_agree():
    events = [
        TextDelta(0, "a"),
        ToolCallDelta(0, 0, "call_1", "f", "{}"),
        TextDelta(0, "b"),
        Finish(0, "tool_calls"),
        Usage(2, 3),
    ]

    def shape(output):
        return [{k: v for k, v in item.items() if k != "id"} for item in output]

    streamed = stream(events, **TOOLS)[-1]["response"]
    built = whole(events, **TOOLS)
    assert shape(streamed["output"]) == shape(built["output"])
    # text after a call opens a new message item: three items, in order
    assert [i["type"] for i in built["output"]] == ["message", "function_call", "message"]
    assert streamed["usage"] == built["usage"] and streamed["status"] == built["status"] == "completed"


LP = [TokenLogprob("Hi", -0.5, None, [TopLogprob("Hi", -0.5), TopLogprob("Ho", -1.5, [72, 111])])]


def test_logprobs_when_included():
    events = [TextDelta(0, "Hi", LP), LogprobsDelta(0, [TokenLogprob("!", None)]), Finish(0, "stop")]
    evs = stream(events, include=["message.output_text.logprobs"], top_logprobs=2)
    deltas = [e for e in evs if e["type"] == "response.output_text.delta"]
    assert deltas[0]["logprobs"] == [
        {
            "token": "Hi",
            "logprob": -0.5,
            "top_logprobs": [{"token": "Hi", "logprob": -0.5}, {"token": "Ho", "logprob": -1.5}],
        }
    ]
    assert deltas[1]["delta"] == "" and deltas[1]["logprobs"][0]["token"] == "!"
    r = validate_response(evs[-1]["response"])
    part = r.output[0].content[0]
    assert [lp.token for lp in part.logprobs] == ["Hi", "!"]
    assert part.logprobs[0].bytes == [72, 105] and part.logprobs[0].top_logprobs[1].bytes == [72, 111]


def test_logprobs_not_included_are_not_sent():
    evs = stream([TextDelta(0, "Hi", LP), LogprobsDelta(0, LP), Finish(0, "stop")])
    deltas = [e for e in evs if e["type"] == "response.output_text.delta"]
    assert len(deltas) == 1 and deltas[0]["logprobs"] == []
    assert evs[-1]["response"]["output"][0]["content"][0]["logprobs"] == []


def test_empty_text_opens_no_item():
    r = validate_response(whole([TextDelta(0, ""), Finish(0, "stop"), Usage(1, 0)]))
    assert r.output == [] and r.status == "completed"
