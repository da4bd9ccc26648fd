"""The stream guard: each stream rule of adapters/base.py, events in, events out.

The rules used to be repaired per runtime (docs/runtimes.md §5, items 6 and 7);
these tests kept their assertions where the rule stayed the same."""

from __future__ import annotations

import logging
import re

import pytest

from adapters.base import (
    FINISH_REASONS,
    ErrorEvent,
    Event,
    Finish,
    GenerationRequest,
    LogprobsDelta,
    SamplingParams,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    Usage,
)
from adapters.errors import GatewayError
from adapters.openai_wire import normalize_finish
from gateway.serving.stream_guard import StreamGuard, guarded

CALL_ID = re.compile(r"^call_[0-9a-f]{24}$")


def req(n: int = 1, **kw) -> GenerationRequest:
    return GenerationRequest(
        request_id="r1", model="m", messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(n=n), **kw
    )


class Source:
    """Scripted events (a `GatewayError` in the script is raised there); records
    whether it was closed."""

    def __init__(self, items) -> None:
        self.items = items
        self.closed = False

    async def events(self):
        try:
            for item in items_or_raise(self.items):
                yield item
        finally:
            self.closed = True


def items_or_raise(items):
    for item in items:
        if isinstance(item, GatewayError):
            raise item
        yield item


async def run(events, request: GenerationRequest | None = None, source: Source | None = None) -> list[Event]:
    source = source or Source(events)
    guard = StreamGuard.for_requests([request or req()], "b1")
    return [e async for e in guarded(source.events(), guard)]


def tool_calls(out):
    return [e for e in out if isinstance(e, ToolCallDelta)]


async def test_tgi_counter_ids_become_unique_and_are_sent_once():
    pieces = [
        ToolCallDelta(0, 0, "0", "get_weather", "{"),
        ToolCallDelta(0, 0, "0", None, '"city"'),
        ToolCallDelta(0, 0, "0", None, ': "Paris"}'),
        Finish(0, "stop"),
    ]
    out = await run(pieces, req(tools=[{}]))
    calls = tool_calls(out)
    assert calls[0].id and calls[0].id.startswith("call_") and calls[0].id != "0"
    assert [c.id for c in calls[1:]] == [None, None]
    assert [c.name for c in calls] == ["get_weather", None, None]
    assert "".join(c.arguments for c in calls) == '{"city": "Paris"}'
    assert out[-1] == Finish(0, "tool_calls")


async def test_two_requests_get_different_ids():
    a = await run([ToolCallDelta(0, 0, "0", "f", "{}"), Finish(0, "stop")])
    b = await run([ToolCallDelta(0, 0, "0", "f", "{}"), Finish(0, "stop")])
    assert a[0].id != b[0].id


async def test_runtime_ids_are_replaced_by_the_gateways_own():
    # One generator for every runtime: a client sees the same id shape whichever answered.
    out = await run([ToolCallDelta(0, 0, "call_abc", "f", ""), ToolCallDelta(0, 0, "call_abc", "f", "{}")])
    assert out[0].id != "call_abc" and CALL_ID.match(out[0].id)
    assert (out[1].id, out[1].name) == (None, None)


async def test_each_call_of_a_choice_and_each_choice_gets_its_own_id():
    pieces = [ToolCallDelta(0, 0, None, "f", "{}"), ToolCallDelta(0, 1, None, "g", "{}")]
    pieces += [ToolCallDelta(1, 0, None, "f", "{}"), Finish(0, "stop"), Finish(1, "stop")]
    ids = [c.id for c in tool_calls(await run(pieces, req(n=2)))]
    assert len(set(ids)) == 3 and all(CALL_ID.match(i) for i in ids)


async def test_a_name_that_comes_late_is_sent_once():
    pieces = [ToolCallDelta(0, 0, None, None, "{"), ToolCallDelta(0, 0, None, "f", "}"), ToolCallDelta(0, 0, None, "f")]
    out = await run([*pieces, Finish(0, "stop")])
    assert [c.name for c in tool_calls(out)] == [None, "f", None]


@pytest.mark.parametrize("runtime_word", ["stop", "tool_calls"])
async def test_a_forced_named_function_finishes_stop_as_openai_does(runtime_word):
    # OpenAI answers a forced named function with finish_reason "stop" (streamed or not;
    # "required" and "auto" calls finish "tool_calls"); vLLM says "stop", SGLang and
    # TRT-LLM "tool_calls": the client reads OpenAI's word whatever the runtime said.
    choice = {"type": "function", "function": {"name": "f"}}
    out = await run([ToolCallDelta(0, 0, "call_1", "f", "{}"), Finish(0, runtime_word)], req(tool_choice=choice))
    assert out[-1] == Finish(0, "stop")


@pytest.mark.parametrize("choice", ["required", "auto", None])
async def test_a_call_not_forced_by_name_finishes_tool_calls(choice):
    out = await run([ToolCallDelta(0, 0, "call_1", "f", "{}"), Finish(0, "stop")], req(tool_choice=choice))
    assert out[-1] == Finish(0, "tool_calls")


async def test_tool_calls_claimed_without_a_call_is_stop():
    out = await run([TextDelta(0, "hi"), Finish(0, "tool_calls")])
    assert out[-1] == Finish(0, "stop")


async def test_length_is_kept_with_tool_calls():
    out = await run([ToolCallDelta(0, 0, "c", "f", "{"), Finish(0, "length")])
    assert out[-1] == Finish(0, "length")


async def test_the_tool_rule_is_per_choice():
    events = [ToolCallDelta(1, 0, None, "f", "{}"), TextDelta(0, "a"), Finish(0, "stop"), Finish(1, "stop")]
    out = await run(events, req(n=2))
    assert [e for e in out if isinstance(e, Finish)] == [Finish(0, "stop"), Finish(1, "tool_calls")]


async def test_parallel_tool_calls_false_keeps_the_first_call_only():
    def pieces():
        return [ToolCallDelta(0, 0, "a", "f", "{}"), ToolCallDelta(0, 1, "b", "g", "{}"), Finish(0, "tool_calls")]

    out = await run(pieces(), req(parallel_tool_calls=False))
    assert [e.tool_index for e in out if isinstance(e, ToolCallDelta)] == [0]
    out = await run(pieces(), req(parallel_tool_calls=True))
    assert [e.tool_index for e in out if isinstance(e, ToolCallDelta)] == [0, 1]


async def test_parallel_tool_calls_false_keeps_the_first_call_whatever_its_index():
    pieces = [ToolCallDelta(0, 3, None, "f", "{"), ToolCallDelta(0, 5, None, "g", "{}"), ToolCallDelta(0, 3, None)]
    out = await run([*pieces, Finish(0, "stop")], req(parallel_tool_calls=False))
    assert [e.tool_index for e in tool_calls(out)] == [3, 3]


async def test_legacy_completions_have_no_tool_calls_and_no_tool_calls_finish():
    completion = GenerationRequest(request_id="r", model="m", kind="completion", prompt="x")
    out = await run([TextDelta(0, "a"), ToolCallDelta(0, 0, None, "f", "{}"), Finish(0, "tool_calls")], completion)
    assert out == [TextDelta(0, "a"), Finish(0, "stop")]


async def test_repeated_finish_dropped_and_nothing_of_a_finished_choice_follows():
    lp = [TokenLogprob("x", -1.0)]
    events = [TextDelta(0, "a"), Finish(0, "length"), Finish(0, "stop"), TextDelta(0, "late"), LogprobsDelta(0, lp)]
    events += [ToolCallDelta(0, 0, None, "f", "{}"), Usage(3, 2)]
    out = await run(events)
    assert out == [TextDelta(0, "a"), Finish(0, "length"), Usage(3, 2)]


async def test_a_choice_left_unfinished_is_an_error_event_naming_it():
    # One rule for every runtime; a runtime known to omit a finish (TGI after a
    # streamed tool call) supplies it in its adapter.
    events = [TextDelta(0, "a"), TextDelta(1, "b"), Finish(1, "length"), Finish(1, "stop"), Usage(3, 2)]
    out = await run(events, req(n=2))
    assert [e for e in out if isinstance(e, Finish)] == [Finish(1, "length")]
    assert isinstance(out[-1], ErrorEvent) and out[-1].error.status == 502
    assert out[-1].error.code == "upstream_error" and "[0]" in out[-1].error.message
    assert not any(isinstance(e, Usage) for e in out)


async def test_a_choice_that_never_started_is_unfinished_too():
    out = await run([TextDelta(0, "a"), Finish(0, "stop")], req(n=2))
    assert isinstance(out[-1], ErrorEvent) and "[1]" in out[-1].error.message


async def test_usage_is_held_until_the_end():
    out = await run([Usage(3, 2), TextDelta(0, "a"), Finish(0, "stop")])
    assert out == [TextDelta(0, "a"), Finish(0, "stop"), Usage(3, 2)]


async def test_no_finish_is_made_up_after_an_error_and_nothing_follows_it():
    err = ErrorEvent(GatewayError(502, "cut"))
    source = Source([TextDelta(0, "a"), err, TextDelta(0, "b"), Finish(0, "stop")])
    out = await run([], source=source)
    assert out == [TextDelta(0, "a"), err]
    assert source.closed  # the error event closed the upstream at once


async def test_an_error_after_text_stays_an_event():
    err = ErrorEvent(GatewayError(502, "cut"))
    assert await run([TextDelta(0, "a"), err]) == [TextDelta(0, "a"), err]


async def test_an_error_raised_inside_the_stream_becomes_an_error_event():
    source = Source([TextDelta(0, "a"), GatewayError(502, "cut", code="upstream_error"), Finish(0, "stop")])
    out = await run([], source=source)
    assert out[0] == TextDelta(0, "a") and isinstance(out[1], ErrorEvent) and out[1].error.message == "cut"
    assert len(out) == 2 and source.closed


async def test_closing_the_guarded_stream_closes_the_upstream():
    source = Source([TextDelta(0, "a"), TextDelta(0, "b"), Finish(0, "stop")])
    stream = guarded(source.events(), StreamGuard.for_requests([req()], "b1"))
    assert await anext(stream) == TextDelta(0, "a")
    await stream.aclose()
    assert source.closed


@pytest.mark.parametrize("reason", ["abort", "error", "cancelled", "eos_token", "", "weird"])
async def test_a_finish_reason_outside_the_enum_never_reaches_the_client(reason):
    # Not mapped to "stop": an engine that aborted or failed gave no answer.
    out = await run([TextDelta(0, "a"), Finish(0, reason), Usage(1, 1)])  # type: ignore[arg-type]
    assert out[0] == TextDelta(0, "a")
    assert isinstance(out[-1], ErrorEvent) and out[-1].error.status == 502 and repr(reason) in out[-1].error.message
    # The contract's mid-stream failure: always upstream_error, and said to be a failure.
    assert out[-1].error.code == "upstream_error" and out[-1].error.message.endswith(
        "which is a failure, not an answer."
    )
    assert not any(isinstance(e, Finish) for e in out)


@pytest.mark.parametrize("reason", sorted(FINISH_REASONS - {"tool_calls"}))
async def test_enum_reasons_pass_unchanged(reason):
    out = await run([TextDelta(0, "a"), Finish(0, reason)])  # type: ignore[arg-type]
    assert out[-1] == Finish(0, reason)  # type: ignore[arg-type]


@pytest.mark.parametrize("word", ["stop", "length", "tool_calls", "content_filter", "function_call", "eos_token"])
def test_the_wire_decoder_keeps_every_known_word_in_the_enum(word):
    assert normalize_finish(word, "b1") in FINISH_REASONS


@pytest.mark.parametrize("word", ["stop_sequence", "repetition", ""])
def test_the_wire_decoder_keeps_every_runtime_word_in_the_enum(word):
    assert normalize_finish(word, "b1") in FINISH_REASONS


def test_the_wire_decoder_leaves_an_unknown_word_to_the_guard():
    assert normalize_finish("something_new", "b1") == "something_new"  # the guard refuses it (above)


@pytest.mark.parametrize("word", ["abort", "error", "cancelled"])
def test_the_wire_decoder_never_maps_a_failure_to_stop(word):
    with pytest.raises(GatewayError) as info:
        normalize_finish(word, "b1")
    assert info.value.status == 502 and word in info.value.message


async def test_parallel_tool_calls_false_keeps_each_choices_own_first_call():
    events = [
        ToolCallDelta(0, 0, None, "f", "{}"),
        ToolCallDelta(1, 1, None, "g", "{}"),
        ToolCallDelta(1, 0, None, "h"),
    ]
    out = await run([*events, Finish(0, "tool_calls"), Finish(1, "tool_calls")], req(n=2, parallel_tool_calls=False))
    assert [(e.index, e.tool_index) for e in tool_calls(out)] == [(0, 0), (1, 1)]


async def test_an_event_already_read_goes_first_and_an_empty_stream_is_unfinished():
    guard = StreamGuard.for_requests([req()], "b1")
    out = [e async for e in guarded(Source([Finish(0, "stop")]).events(), guard, TextDelta(0, "a"))]
    assert out == [TextDelta(0, "a"), Finish(0, "stop")]
    (out,) = await run([])
    assert isinstance(out, ErrorEvent) and out.error.message.endswith("without finishing choice(s) [0].")


async def test_each_failure_the_guard_sees_names_the_backend_in_the_log_only(caplog):
    caplog.set_level(logging.WARNING)
    await run([TextDelta(0, "a"), ErrorEvent(GatewayError(400, "bad token"))])
    await run([], source=Source([TextDelta(0, "a"), GatewayError(422, "bad input")]))
    (weird,) = await run([Finish(0, "weird")])
    *_, missing = await run([TextDelta(1, "b"), Finish(1, "stop")], req(n=3))
    assert [r.getMessage() for r in caplog.records] == [
        "backend b1 failed mid-stream: bad token",
        "backend b1 failed mid-stream: bad input",
        "backend b1 ended choice 0 with finish_reason 'weird'",
        "backend b1 ended the stream without finishing choice(s) [0, 2]",
    ]
    assert "b1" not in weird.error.message and "b1" not in missing.error.message
