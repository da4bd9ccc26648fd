"""EventRepair: what only the whole stream shows (RUNTIMES.md section 5, items 6 and 7)."""

from __future__ import annotations

from adapters.base import ErrorEvent, Finish, GenerationRequest, TextDelta, ToolCallDelta, Usage
from adapters.errors import GatewayError
from adapters.runtime_stream import EventRepair, repaired


def run(repair: EventRepair, events) -> list:
    out = []
    for e in events:
        out.extend(repair.feed(e))
    return out + repair.finish()


def req(**kw) -> GenerationRequest:
    return GenerationRequest(request_id="r1", model="m", messages=[{"role": "user", "content": "hi"}], **kw)


def test_tgi_counter_ids_become_unique_and_are_sent_once():
    pieces = [
        ToolCallDelta(0, 0, "0", "get_weather", "{"),
        ToolCallDelta(0, 0, "0", None, '"city"'),
        ToolCallDelta(0, 0, "0", None, ': "Paris"}'),
        Finish(0, "stop"),
    ]
    out = run(EventRepair(req(tools=[{}])), pieces)
    calls = [e for e in out if isinstance(e, ToolCallDelta)]
    assert calls[0].id and calls[0].id.startswith("call_") and calls[0].id != "0"
    assert [c.id for c in calls[1:]] == [None, None]
    assert [c.name for c in calls] == ["get_weather", None, None]
    assert "".join(c.arguments for c in calls) == '{"city": "Paris"}'
    assert out[-1] == Finish(0, "tool_calls")


def test_two_requests_get_different_ids():
    a = run(EventRepair(req()), [ToolCallDelta(0, 0, "0", "f", "{}"), Finish(0, "stop")])
    b = run(EventRepair(req()), [ToolCallDelta(0, 0, "0", "f", "{}"), Finish(0, "stop")])
    assert a[0].id != b[0].id


def test_runtime_ids_are_kept():
    out = run(EventRepair(req()), [ToolCallDelta(0, 0, "call_abc", "f", ""), ToolCallDelta(0, 0, None, None, "{}")])
    assert out[0].id == "call_abc"


def test_named_tool_choice_finishes_with_tool_calls_like_every_runtime():
    # vLLM says "stop" for a forced named tool, the others "tool_calls": one convention.
    choice = {"type": "function", "function": {"name": "f"}}
    out = run(EventRepair(req(tool_choice=choice)), [ToolCallDelta(0, 0, "call_1", "f", "{}"), Finish(0, "stop")])
    assert out[-1] == Finish(0, "tool_calls")


def test_tool_calls_claimed_without_a_call_is_stop():
    out = run(EventRepair(req()), [TextDelta(0, "hi"), Finish(0, "tool_calls")])
    assert out[-1] == Finish(0, "stop")


def test_length_is_kept_with_tool_calls():
    out = run(EventRepair(req()), [ToolCallDelta(0, 0, "c", "f", "{"), Finish(0, "length")])
    assert out[-1] == Finish(0, "length")


def test_parallel_tool_calls_false_keeps_the_first_call_only():
    pieces = [ToolCallDelta(0, 0, "a", "f", "{}"), ToolCallDelta(0, 1, "b", "g", "{}"), Finish(0, "tool_calls")]
    out = run(EventRepair(req(parallel_tool_calls=False)), pieces)
    assert [e.tool_index for e in out if isinstance(e, ToolCallDelta)] == [0]
    out = run(EventRepair(req(parallel_tool_calls=True)), pieces)
    assert [e.tool_index for e in out if isinstance(e, ToolCallDelta)] == [0, 1]


def test_missing_finish_is_made_up_before_usage_and_repeated_finish_dropped():
    events = [TextDelta(0, "a"), TextDelta(1, "b"), Finish(1, "length"), Finish(1, "stop"), Usage(3, 2)]
    out = run(EventRepair(req()), events)
    assert [e for e in out if isinstance(e, Finish)] == [Finish(1, "length"), Finish(0, "stop")]
    assert out[-1] == Usage(3, 2)


def test_no_finish_is_made_up_after_an_error():
    err = ErrorEvent(GatewayError(502, "cut"))
    out = run(EventRepair(req()), [TextDelta(0, "a"), err])
    assert out == [TextDelta(0, "a"), err]


async def _events(*items):
    for item in items:
        yield item


async def test_an_error_before_any_event_is_raised():
    gen = repaired(_events(ErrorEvent(GatewayError(503, "queue full", retryable=True))), EventRepair(req()))
    try:
        await gen.__anext__()
        raise AssertionError("not raised")
    except GatewayError as exc:
        assert exc.status == 503 and exc.retryable


async def test_an_error_after_text_stays_an_event():
    err = ErrorEvent(GatewayError(502, "cut"))
    out = [e async for e in repaired(_events(TextDelta(0, "a"), err), EventRepair(req()))]
    assert out == [TextDelta(0, "a"), err]
