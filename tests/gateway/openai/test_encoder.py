"""The encoder's OpenAI rules, one test per rule, on scripted event sequences.

The events pass the stream guard first, as every stream does in the gateway: the
encoder trusts the stream rules (adapters/base.py) and these tests check that what
it writes for guarded streams is still right."""

from __future__ import annotations

import asyncio
import re

import orjson
import pytest

from adapters.base import ErrorEvent, Event, Finish, TextDelta, TokenLogprob, ToolCallDelta, TopLogprob, Usage
from adapters.errors import GatewayError
from gateway.openai.encoder import ResponseBuilder, StreamEncoder
from gateway.serving.stream_guard import StreamGuard, guarded

CALL_ID = re.compile(r"^call_[0-9a-f]{24}$")


def delivered(enc: StreamEncoder | ResponseBuilder, events) -> list[Event]:
    """`events` as the stream guard hands them to an encoder made like `enc`."""

    async def source():
        for event in events:
            yield event

    async def run() -> list[Event]:
        guard = StreamGuard(choices=enc.n, chat=enc.chat, parallel_tool_calls=True, backend="b1")
        return [e async for e in guarded(source(), guard)]

    return asyncio.run(run())


def frames(enc: StreamEncoder, events, close: bool = True) -> list:
    return written(enc, delivered(enc, events), close)


def written(enc: StreamEncoder, events: list[Event], close: bool = True) -> list:
    """The frames `enc` writes for `events` as they are (already guarded)."""
    raw = b"".join(enc.feed(e) for e in events) + (enc.close() if close else b"")
    out = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        assert block.startswith(b"data: "), block
        data = block[6:]
        out.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return out


def chunks(fs):
    return [f for f in fs if f != "[DONE]"]


def enc(**kw) -> StreamEncoder:
    return StreamEncoder("chatcmpl-1", 123, "m", **kw)


def test_role_only_in_first_delta_and_not_before_a_token():
    fs = frames(enc(), [TextDelta(0, "a"), TextDelta(0, "b"), Finish(0, "stop")])
    deltas = [c["choices"][0]["delta"] for c in chunks(fs)]
    assert deltas[0] == {"role": "assistant", "content": "a"}
    assert all("role" not in d for d in deltas[1:])
    # nothing before the first token: no event -> no frame
    e = enc()
    assert e.feed(TextDelta(0, "")) == b""


def test_tool_call_header_once_function_always_arguments_string():
    events = [
        ToolCallDelta(0, 0, "call_x", "f", ""),
        ToolCallDelta(0, 0, "call_x", "f", '{"a"'),
        ToolCallDelta(0, 0, None, "f", ": 1}"),
        Finish(0, "stop"),
    ]
    e = enc()
    sent = delivered(e, events)
    cs = chunks(written(e, sent))
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in cs if "tool_calls" in c["choices"][0]["delta"]]
    # the id the guard gave the first piece (the gateway's own, not the runtime's)
    assert calls[0]["id"] == sent[0].id and CALL_ID.match(calls[0]["id"])
    assert calls[0]["type"] == "function" and calls[0]["function"]["name"] == "f"
    for later in calls[1:]:
        assert set(later) == {"index", "function"} and set(later["function"]) == {"arguments"}
    assert all(isinstance(c["function"]["arguments"], str) for c in calls)
    assert "".join(c["function"]["arguments"] for c in calls) == '{"a": 1}'
    # a choice that made tool calls finishes with tool_calls
    assert cs[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_indices_dense_and_ids_made_when_missing():
    events = [ToolCallDelta(0, 5, None, "f", "{}"), ToolCallDelta(0, 9, None, "g", "{}"), Finish(0, "tool_calls")]
    cs = chunks(frames(enc(), events))
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in cs if "tool_calls" in c["choices"][0]["delta"]]
    assert [c["index"] for c in calls] == [0, 1]
    assert all(c["id"].startswith("call_") and len(c["id"]) > 8 for c in calls)
    assert calls[0]["id"] != calls[1]["id"]


def test_finish_reason_exactly_once_per_choice_and_nothing_after():
    fs = chunks(
        frames(
            enc(n=2),
            [
                TextDelta(0, "a"),
                TextDelta(1, "b"),
                Finish(0, "stop"),
                Finish(0, "length"),
                TextDelta(0, "late"),
                Finish(1, "length"),
            ],
        )
    )
    reasons = [
        (c["choices"][0]["index"], c["choices"][0]["finish_reason"]) for c in fs if c["choices"][0]["finish_reason"]
    ]
    assert reasons == [(0, "stop"), (1, "length")]
    assert all(c["choices"][0].get("delta", {}).get("content") != "late" for c in fs)


def test_usage_chunk_last_with_empty_choices_only_when_asked():
    events = [TextDelta(0, "a"), Finish(0, "stop"), Usage(3, 1)]
    fs = frames(enc(include_usage=True), events)
    assert fs[-1] == "[DONE]"
    assert fs[-2]["choices"] == [] and fs[-2]["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 1,
        "total_tokens": 4,
    }
    # as OpenAI's: every chunk before the usage chunk says `"usage": null`
    assert all(c["usage"] is None for c in fs[:-2])
    fs = frames(enc(include_usage=False), events)
    assert all(c == "[DONE]" or (c["choices"] and "usage" not in c) for c in fs)


def test_done_always_also_after_error_and_nothing_follows():
    e = enc()
    events = [TextDelta(0, "a"), ErrorEvent(GatewayError(502, "boom", code="upstream_error")), TextDelta(0, "more")]
    raw = b"".join(e.feed(ev) for ev in delivered(e, events)) + e.close()
    blocks = [b for b in raw.split(b"\n\n") if b]
    assert blocks[-1] == b"data: [DONE]"
    err = orjson.loads(blocks[-2][6:])
    assert err == {"error": {"message": "boom", "type": "server_error", "param": None, "code": "upstream_error"}}
    assert len(blocks) == 3


def test_dense_choice_order_for_n_gt_1():
    # choice 1 speaks first; it must not be introduced before choice 0
    fs = chunks(frames(enc(n=2), [TextDelta(1, "b"), TextDelta(0, "a"), Finish(1, "stop"), Finish(0, "stop")]))
    first_seen = []
    for c in fs:
        i = c["choices"][0]["index"]
        if i not in first_seen:
            first_seen.append(i)
    assert first_seen == [0, 1]
    assert fs[1]["choices"][0]["delta"]["role"] == "assistant"


def test_same_id_created_model_and_object_on_every_chunk():
    fs = chunks(
        frames(
            enc(n=2, include_usage=True),
            [TextDelta(0, "a"), TextDelta(1, "b"), Finish(0, "stop"), Finish(1, "stop"), Usage(1, 2)],
        )
    )
    assert {(c["id"], c["created"], c["model"], c["object"]) for c in fs} == {
        ("chatcmpl-1", 123, "m", "chat.completion.chunk")
    }


def test_no_nulls_where_spec_forbids():
    fs = chunks(frames(enc(), [TextDelta(0, "a"), Finish(0, "stop")]))
    for c in fs:
        assert "usage" not in c and "system_fingerprint" not in c
        assert "logprobs" not in c["choices"][0]  # omitted unless asked


def test_finish_without_tokens_still_carries_role():
    cs = chunks(frames(enc(), [Finish(0, "length")]))
    assert cs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert cs[0]["choices"][0]["finish_reason"] == "length"


def test_chat_logprobs_in_stream():
    lp = [TokenLogprob("a", -0.5, [97], [TopLogprob("a", -0.5, [97]), TopLogprob("b", -1.0, [98])])]
    cs = chunks(frames(enc(logprobs=True), [TextDelta(0, "a", lp), Finish(0, "stop")]))
    content = cs[0]["choices"][0]["logprobs"]["content"]
    assert content == [
        {
            "token": "a",
            "logprob": -0.5,
            "bytes": [97],
            "top_logprobs": [
                {"token": "a", "logprob": -0.5, "bytes": [97]},
                {"token": "b", "logprob": -1.0, "bytes": [98]},
            ],
        }
    ]


def test_completion_stream_shape_and_text_offsets():
    e = StreamEncoder("cmpl-1", 1, "m", chat=False, logprobs=True)
    lp1 = [TokenLogprob("ab", -0.1), TokenLogprob("c", -0.2)]
    lp2 = [TokenLogprob("d", -0.3)]
    cs = chunks(frames(e, [TextDelta(0, "abc", lp1), TextDelta(0, "d", lp2), Finish(0, "tool_calls")]))
    assert all(c["object"] == "text_completion" for c in cs)
    assert cs[0]["choices"][0]["logprobs"]["text_offset"] == [0, 2]
    assert cs[1]["choices"][0]["logprobs"]["text_offset"] == [3]
    assert cs[-1]["choices"][0]["finish_reason"] == "stop"  # completions have no tool_calls reason


def test_an_unfinished_choice_ends_the_stream_with_an_error_event():
    # The guard reports it (tests/gateway/serving/test_stream_guard.py); the encoder writes it.
    fs = frames(enc(n=2), [TextDelta(0, "a"), Finish(0, "stop")])
    assert fs[-1] == "[DONE]"
    assert fs[-2]["error"]["code"] == "upstream_error" and "[1]" in fs[-2]["error"]["message"]


@pytest.mark.parametrize("chat", [True, False])
def test_whole_response_shape(chat):
    b = ResponseBuilder("id1", 5, "m", n=2, chat=chat)
    for ev in [TextDelta(0, "he"), TextDelta(1, "x"), TextDelta(0, "llo"), Finish(0, "stop"), Finish(1, "length")]:
        b.feed(ev)
    out = b.build(Usage(4, 3, cached_tokens=2))
    assert out["object"] == ("chat.completion" if chat else "text_completion")
    assert [c["index"] for c in out["choices"]] == [0, 1]
    assert out["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 3,
        "total_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 2},
    }
    c0 = out["choices"][0]
    assert c0["logprobs"] is None and c0["finish_reason"] == "stop"
    if chat:
        assert c0["message"] == {"role": "assistant", "content": "hello", "refusal": None}
    else:
        assert c0["text"] == "hello"


def test_whole_response_tool_calls():
    b = ResponseBuilder("id1", 5, "m")
    sent = delivered(
        b,
        [
            ToolCallDelta(0, 0, "c1", "f", '{"x":'),
            ToolCallDelta(0, 0, "c1", "f", " 1}"),
            ToolCallDelta(0, 1, None, "g", "{}"),
            Finish(0, "stop"),
        ],
    )
    for ev in sent:
        b.feed(ev)
    out = b.build(Usage(1, 1))
    msg = out["choices"][0]["message"]
    assert msg["content"] is None
    first_ids = [ev.id for ev in sent if isinstance(ev, ToolCallDelta) and ev.id]
    assert [(t["id"], t["function"]["name"], t["function"]["arguments"]) for t in msg["tool_calls"]] == [
        (first_ids[0], "f", '{"x": 1}'),
        (first_ids[1], "g", "{}"),
    ]
    assert first_ids[0] != first_ids[1] and all(CALL_ID.match(i) for i in first_ids)
    assert out["choices"][0]["finish_reason"] == "tool_calls"


def test_whole_response_raises_on_error_event():
    b = ResponseBuilder("id1", 5, "m")
    with pytest.raises(GatewayError):
        b.feed(ErrorEvent(GatewayError(502, "x")))


def test_echoed_first_token_logprob_is_null_in_completions_only():
    from gateway.openai.encoder import chat_logprobs, completion_logprobs

    items = [TokenLogprob("Hi", None), TokenLogprob(" there", -0.5)]
    assert completion_logprobs(items, 0)[0]["token_logprobs"] == [None, -0.5]
    assert [t["logprob"] for t in chat_logprobs(items)] == [-9999.0, -0.5]
