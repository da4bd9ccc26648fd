"""The Responses encoder's fast paths against its general one: the text delta built
from a per-item template and the `response` events spliced from a serialized object
write the bytes `_frame` writes for the same payload, and the response object
serialized around its cached echo is `orjson.dumps` of the built one; the whole
answer's quiet text
and finish (`OutputState.take_text`, `finish_quietly`) leave the items exactly as
`feed` does, and refuse whatever `feed` must handle itself."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from adapters.base import ErrorEvent, Finish, TextDelta, TokenLogprob, ToolCallDelta, Usage
from adapters.errors import GatewayError
from gateway.openai.responses import MemoryResponseStore, output, prepare_response
from gateway.openai.responses.answer import ResponsesAnswer
from gateway.openai.responses.encoder import ResponseAssembly, ResponseStreamEncoder
from gateway.openai.responses.output import OutputState
from gateway.openai.responses.request import parse_request
from gateway.openai.responses.response_object import new_shell

WHERE: dict[str, Any] = {"tenant": "t", "store": MemoryResponseStore(), "request_id": "r"}
TEXTS = ["plain", "", 'quote " and \\ backslash', "line\nbreak\ttab\x01", "\u00e9\u2603\U0001f600", "</script>"]


def encoder() -> ResponseStreamEncoder:
    request = parse_request({"model": "m", "input": "hi", "metadata": {"k": "\u00e9"}})
    return ResponseStreamEncoder(ResponseAssembly(new_shell(request, "resp_x", 1), logprobs=False))


def general(kind: str, sequence: int, **fields: Any) -> bytes:
    """What `_frame` writes (a second encoder at the same sequence number)."""
    enc = encoder()
    enc.sequence = sequence
    return enc._frame({"type": kind, **fields})


def test_text_delta_is_the_general_frame_byte_for_byte():
    enc = encoder()
    state = enc.assembly.state
    enc.feed(TextDelta(0, "open"))  # opens message 0
    enc.feed(ToolCallDelta(0, 0, "call_1", "f", "{}"))  # closes it, opens the call at 1
    enc.feed(TextDelta(0, "again"))  # a new message at output index 2
    for index in (2, 0, 2):  # the template follows the index it is asked for
        item_id = state.items[index].id
        for text in TEXTS:
            sequence = enc.sequence
            want = general(
                "response.output_text.delta",
                sequence,
                item_id=item_id,
                output_index=index,
                content_index=0,
                delta=text,
                logprobs=[],
            )
            assert enc.text_delta(index, text) == want
            assert enc.sequence == sequence + 1


@pytest.mark.parametrize("kind", ["response.created", "response.completed", "response.incomplete"])
def test_a_spliced_response_event_is_the_general_frame_byte_for_byte(kind):
    enc = encoder()
    obj = enc.assembly.result()
    enc.sequence = 7
    assert enc._spliced(kind, orjson.dumps(obj)) == general(kind, 7, response=obj)
    assert enc.sequence == 8


def test_start_is_two_frames_of_one_response():
    enc = encoder()
    created = enc.assembly.shell.build("in_progress", [], None)
    want = general("response.created", 0, response=created) + general("response.in_progress", 1, response=created)
    assert enc.start() == want and enc.sequence == 2


def items(state: OutputState) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in state.output()]


def twins(events, logprobs: bool = False) -> tuple[OutputState, OutputState]:
    a, b = OutputState(logprobs=logprobs), OutputState(logprobs=logprobs)
    for event in events:
        a.feed(event)
        b.feed(event)
    return a, b


@pytest.mark.parametrize(
    "before",
    [[], [TextDelta(0, "a")], [TextDelta(0, "a"), ToolCallDelta(0, 0, "c", "f", "{}"), Finish(0, "stop")]],
    ids=["nothing open", "a message open", "finished"],
)
def test_take_text_leaves_the_items_as_feed_does(before):
    event = TextDelta(0, "more")
    quiet, fed = twins(before)
    taken = quiet.take_text(event)
    fed.feed(event)
    assert taken is (fed.finish_reason is None)  # after the finish nothing is taken
    assert items(quiet) == items(fed) and quiet.open == fed.open


@pytest.mark.parametrize(
    "before, event, logprobs",
    [
        ([], TextDelta(1, "other choice"), False),
        ([], TextDelta(0, ""), False),
        ([ToolCallDelta(0, 0, "c", "f", "{}")], TextDelta(0, "after a call"), False),  # the call must close
        ([], TextDelta(0, "a", [TokenLogprob("a", -1.0)]), True),  # logprobs to keep
        ([TextDelta(0, "a")], TextDelta(0, "b", [TokenLogprob("b", -1.0)]), True),
        ([], Finish(0, "stop"), False),
    ],
)
def test_take_text_refuses_what_feed_must_handle(before, event, logprobs):
    quiet, _ = twins(before, logprobs)
    snapshot = items(quiet)
    assert quiet.take_text(event) is False
    assert items(quiet) == snapshot


def test_text_after_the_finish_is_never_taken():
    state, _ = twins([TextDelta(0, "a"), Finish(0, "stop")])
    assert state.open_text is None
    assert state.more_text(TextDelta(0, "late")) is False and state.take_text(TextDelta(0, "late")) is False
    assert items(state)[0]["content"][0]["text"] == "a"


@pytest.mark.parametrize("reason", ["stop", "length", "content_filter", "tool_calls"])
@pytest.mark.parametrize(
    "before",
    [
        [],
        [TextDelta(0, "a")],
        [ToolCallDelta(0, 0, "c", None, '{"x')],  # a call whose name never came
        [TextDelta(0, "a"), ToolCallDelta(0, 0, "c", "f", "{}")],
    ],
    ids=["nothing open", "message open", "unnamed call open", "call after text"],
)
def test_finish_quietly_leaves_the_items_as_feed_does(before, reason):
    quiet, fed = twins(before)
    assert quiet.finish_quietly(Finish(0, reason)) is True
    fed.feed(Finish(0, reason))
    assert items(quiet) == items(fed)
    assert (quiet.finish_reason, quiet.open, quiet.open_text) == (fed.finish_reason, None, None)


def test_finish_quietly_refuses_another_choice_and_a_second_finish():
    state, _ = twins([TextDelta(0, "a")])
    assert state.finish_quietly(Finish(1, "length")) is False
    assert state.open == 0 and state.finish_reason is None
    assert state.finish_quietly(Finish(0, "stop")) is True
    assert state.finish_quietly(Finish(0, "length")) is False
    assert state.finish_reason == "stop" and items(state)[0]["status"] == "completed"


@pytest.mark.parametrize(
    "fields",
    [{}, {"user": "u\u00e9", "instructions": 'say "hi"', "metadata": {"k": "v"}, "temperature": 0.25}],
    ids=["defaults", "every echo kind"],
)
@pytest.mark.parametrize(
    "args",
    [
        ("in_progress", [], None, None, None, None),
        ("completed", [{"id": "msg_1", "type": "message"}], Usage(3, 2, 1), None, None, 17),
        ("incomplete", [], Usage(3, 2), None, "max_output_tokens", None),
        ("failed", [], None, GatewayError(429, "slow", code="rate_limit_exceeded"), None, None),
    ],
    ids=["created", "completed", "incomplete", "failed"],
)
def test_build_json_is_the_built_object_serialized(fields, args):
    request = parse_request({"model": "m", "input": "hi", **fields})
    shell = new_shell(request, "resp_x", 1)
    for _ in range(2):  # the second time from the cached echo
        assert shell.build_json(*args) == orjson.dumps(shell.build(*args))


def test_result_json_is_the_result_serialized():
    enc = encoder()
    enc.assembly.clock = lambda: 42.9
    for event in (TextDelta(0, "a"), Finish(0, "length"), Usage(1, 1)):
        enc.feed(event)
        assert enc.assembly.result_json() == orjson.dumps(enc.assembly.result())
    enc.assembly.fail(GatewayError(502, "gone", code="upstream_error"))
    assert enc.assembly.result_json() == orjson.dumps(enc.assembly.result())


TOOL = {"tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]}
STREAMS = {
    "stop": [TextDelta(0, "a"), TextDelta(0, ' "b"\n'), Finish(0, "stop"), Usage(1, 2)],
    "length": [TextDelta(0, "\u00e9"), Finish(0, "length")],
    "content filter": [TextDelta(0, "a"), Finish(0, "content_filter")],
    "empty first": [TextDelta(0, ""), TextDelta(0, "a"), Finish(0, "stop")],
    "other choice": [TextDelta(1, "x"), TextDelta(0, "a"), Finish(1, "stop"), Finish(0, "stop")],
    "call then text": [ToolCallDelta(0, 0, "c", "f", "{}"), TextDelta(0, "a"), Finish(0, "stop")],
    "text then call": [TextDelta(0, "a"), ToolCallDelta(0, 0, "c", "f", "{}"), Finish(0, "tool_calls")],
    "failed, then text": [ErrorEvent(GatewayError(502, "x")), TextDelta(0, "a"), Finish(0, "stop")],
}


@pytest.mark.parametrize("name", STREAMS)
async def test_the_answers_short_paths_write_what_feed_writes(name, monkeypatch):
    counter = iter(range(1000))
    # The ids in order of creation, the same for both answers (the rest is their own).
    monkeypatch.setattr(output, "new_message_id", lambda: f"msg_{next(counter)}")
    monkeypatch.setattr(output, "new_function_call_id", lambda: f"fc_{next(counter)}")
    prepared = await prepare_response({"model": "m", "input": "hi", "stream": True, **TOOL}, **WHERE)
    fast, general = ResponsesAnswer(prepared, WHERE["store"]), ResponsesAnswer(prepared, WHERE["store"])
    counter = iter(range(1000))
    got = [fast.stream_feed(event) for event in STREAMS[name]]
    counter = iter(range(1000))
    want = [general.encoder.feed(event) for event in STREAMS[name]]
    # One write per event until this choice's finish; what the finish causes is held
    # for the terminal frames (answer.py), in the order `feed` wrote it.
    cut = next(i for i, e in enumerate(STREAMS[name]) if type(e) is Finish and e.index == 0)
    assert got[:cut] == want[:cut]
    assert got[cut:] == [b""] * len(want[cut:]) and fast.held == b"".join(want[cut:])
    # The terminal object, from the items the templates serialized when they all are.
    for answer in (fast, general):
        answer.assembly.clock = lambda: 1_700_000_005.0
    assert fast.encoder.terminal() == general.encoder.terminal(general.assembly.result())


def test_a_message_opened_and_closed_from_templates_is_what_frame_writes():
    enc = encoder()
    state = enc.assembly.state
    assert state.take_text(TextDelta(0, "h\u00e9"))
    opened = enc.message_opened(0, "h\u00e9")
    item_id = state.items[0].id
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    assert opened == (
        general("response.output_item.added", 0, output_index=0, item=state.item(0, full=False))
        + general("response.content_part.added", 1, item_id=item_id, output_index=0, content_index=0, part=part)
        + general(
            "response.output_text.delta",
            2,
            item_id=item_id,
            output_index=0,
            content_index=0,
            delta="h\u00e9",
            logprobs=[],
        )
    )
    assert state.more_text(TextDelta(0, ' "x"'))
    assert state.finish_quietly(Finish(0, "length"))
    closed = enc.message_closed(0)
    part = {"type": "output_text", "text": 'h\u00e9 "x"', "annotations": [], "logprobs": []}
    assert closed == (
        general(
            "response.output_text.done",
            3,
            item_id=item_id,
            output_index=0,
            content_index=0,
            text=part["text"],
            logprobs=[],
        )
        + general("response.content_part.done", 4, item_id=item_id, output_index=0, content_index=0, part=part)
        + general("response.output_item.done", 5, output_index=0, item=state.item(0))
    )
    assert state.item(0)["status"] == "incomplete" and enc.sequence == 6
