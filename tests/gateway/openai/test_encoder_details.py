"""The encoder's smaller promises, each on its own (tests/gateway/openai/test_encoder.py
holds one test per OpenAI rule): text offsets that run on across pieces without
logprobs, logprobs left out when not asked for, choices that started early
written out when the stream ends or fails, a tool call's name learnt from a later
piece, choices that never spoke, and the usage of a stream without cached tokens."""

from __future__ import annotations

import orjson

from adapters.base import Finish, LogprobsDelta, TextDelta, TokenLogprob, ToolCallDelta, TopLogprob, Usage
from adapters.errors import GatewayError
from gateway.openai.encoder import DONE, ResponseBuilder, StreamEncoder, sse_error


def parse(raw: bytes) -> list:
    out = []
    for block in raw.split(b"\n\n"):
        if block:
            assert block.startswith(b"data: ")
            out.append("[DONE]" if block == b"data: [DONE]" else orjson.loads(block[6:]))
    return out


def choice(frame) -> dict:
    return frame["choices"][0]


def test_completion_offsets_run_on_across_pieces_without_logprobs():
    e = StreamEncoder("cmpl-1", 1, "m", chat=False, logprobs=True)
    e.feed(TextDelta(0, "abc"))  # no logprobs on this piece
    frame = parse(e.feed(TextDelta(0, "de", [TokenLogprob("d", -1.0), TokenLogprob("e", -2.0, None, [])])))[0]
    assert choice(frame)["logprobs"]["text_offset"] == [3, 4]
    assert choice(frame)["logprobs"]["tokens"] == ["d", "e"]


def test_logprobs_are_left_out_when_not_asked_for():
    e = StreamEncoder("c-1", 1, "m")
    assert e.feed(LogprobsDelta(0, [TokenLogprob("x", -1.0)])) == b""
    frame = parse(e.feed(TextDelta(0, "x", [TokenLogprob("x", -1.0)])))[0]
    assert "logprobs" not in choice(frame)
    asked = StreamEncoder("c-1", 1, "m", logprobs=True)
    frame = parse(asked.feed(LogprobsDelta(0, [TokenLogprob("y", -0.5, [121], [TopLogprob("y", -0.5, [121])])])))[0]
    assert choice(frame)["delta"] == {"role": "assistant", "content": ""}
    assert choice(frame)["logprobs"] == {
        "content": [
            {
                "token": "y",
                "logprob": -0.5,
                "bytes": [121],
                "top_logprobs": [{"token": "y", "logprob": -0.5, "bytes": [121]}],
            }
        ],
        "refusal": None,
    }


def test_a_choice_that_started_early_is_written_when_the_stream_ends():
    e = StreamEncoder("c-1", 1, "m", n=2)
    assert e.feed(TextDelta(1, "later")) == b""  # waits for choice 0
    assert e.feed(Finish(1, "stop")) == b""
    fs = parse(e.close())
    assert [choice(f)["index"] for f in fs[:-1]] == [1, 1] and fs[-1] == "[DONE]"
    assert choice(fs[0])["delta"] == {"role": "assistant", "content": "later"}
    assert choice(fs[1]) == {"index": 1, "delta": {}, "finish_reason": "stop"}
    assert e.close() == b"" and e.error(GatewayError(502, "x")) == b""  # closed: nothing more


def test_a_choice_that_started_early_is_written_before_a_failure():
    e = StreamEncoder("c-1", 1, "m", n=2)
    e.feed(TextDelta(1, "b"))
    raw = e.error(GatewayError(502, "gone", code="upstream_error"))
    fs = parse(raw)
    assert choice(fs[0])["index"] == 1 and fs[1]["error"]["code"] == "upstream_error" and fs[2] == "[DONE]"
    assert raw.endswith(DONE) and e.close() == b""
    assert (
        sse_error(GatewayError(400, "m"))
        == b'data: {"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}\n\n' + DONE
    )


def test_pending_choices_flush_in_index_order_once_the_first_speaks():
    e = StreamEncoder("c-1", 1, "m", n=3)
    e.feed(TextDelta(2, "c"))
    e.feed(TextDelta(1, "b"))
    fs = parse(e.feed(TextDelta(0, "a")))
    assert [(choice(f)["index"], choice(f)["delta"]["content"]) for f in fs] == [(0, "a"), (1, "b"), (2, "c")]
    assert all(choice(f)["delta"]["role"] == "assistant" for f in fs)


def test_a_finish_first_in_a_completion_stream_is_a_bare_text_chunk():
    e = StreamEncoder("cmpl-1", 1, "m", chat=False)
    frame = parse(e.feed(Finish(0, "length")))[0]
    assert choice(frame) == {"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}
    assert frame["object"] == "text_completion"


def test_an_empty_text_piece_writes_nothing():
    e = StreamEncoder("c-1", 1, "m")
    assert e.feed(TextDelta(0, "")) == b""
    assert parse(e.feed(TextDelta(0, "a")))[0]["choices"][0]["delta"]["role"] == "assistant"


def test_a_stream_usage_without_cached_tokens_has_no_details():
    e = StreamEncoder("c-1", 1, "m", include_usage=True)
    e.feed(Finish(0, "stop"))
    e.feed(Usage(3, 2))
    usage = parse(e.close())[-2]
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    quiet = StreamEncoder("c-1", 1, "m")
    quiet.feed(Usage(3, 2))
    assert quiet.close() == DONE


def test_a_tool_call_name_from_a_later_piece_reaches_the_whole_response():
    b = ResponseBuilder("id", 1, "m")
    b.feed(ToolCallDelta(0, 0, "call_1", None, '{"a"'))
    b.feed(ToolCallDelta(0, 0, None, "lookup", ":1}"))
    b.feed(ToolCallDelta(0, 0, None, "other", ""))  # a name is taken once
    b.feed(Finish(0, "tool_calls"))
    call = b.build(Usage(1, 1))["choices"][0]["message"]["tool_calls"][0]
    assert call == {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"a":1}'}}


def test_a_choice_that_never_spoke_is_an_empty_stop():
    chat = ResponseBuilder("id", 1, "m", n=2).build(Usage(1, 0))
    assert chat["choices"][1] == {
        "index": 1,
        "message": {"role": "assistant", "content": "", "refusal": None},
        "logprobs": None,
        "finish_reason": "stop",
    }
    text = ResponseBuilder("id", 1, "m", chat=False, logprobs=True).build(Usage(1, 0))
    assert text["choices"][0] == {
        "index": 0,
        "text": "",
        "logprobs": {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []},
        "finish_reason": "stop",
    }


def test_whole_response_logprobs_gather_text_and_logprob_pieces():
    b = ResponseBuilder("id", 1, "m", logprobs=True)
    b.feed(TextDelta(0, "a", [TokenLogprob("a", -1.0)]))
    b.feed(TextDelta(0, "b"))
    b.feed(LogprobsDelta(0, [TokenLogprob("b", None)]))
    out = b.build(Usage(1, 2))["choices"][0]
    assert out["message"]["content"] == "ab"
    assert [(t["token"], t["logprob"]) for t in out["logprobs"]["content"]] == [("a", -1.0), ("b", -9999.0)]
    assert out["logprobs"]["refusal"] is None


HEAD = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 77, "model": "m"}


def test_frames_are_written_whole_for_text_and_tool_calls():
    e = StreamEncoder("chatcmpl-9", 77, "m")
    first = parse(e.feed(ToolCallDelta(0, 0, "call_1", None, "{")))[0]
    assert first == {
        **HEAD,
        "choices": [
            {
                "index": 0,
                "delta": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "", "arguments": "{"}}
                    ],
                },
                "finish_reason": None,
            }
        ],
    }
    more = parse(e.feed(ToolCallDelta(0, 0, None, None, "}")))[0]
    assert more["choices"] == [
        {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}, "finish_reason": None}
    ]
    text = parse(e.feed(TextDelta(0, "ok")))[0]
    assert text == {**HEAD, "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]}


def test_completion_text_frames_are_written_whole():
    e = StreamEncoder("cmpl-9", 77, "m", chat=False)
    frame = parse(e.feed(TextDelta(0, "hi")))[0]
    assert frame == {
        "id": "cmpl-9",
        "object": "text_completion",
        "created": 77,
        "model": "m",
        "choices": [{"index": 0, "text": "hi", "logprobs": None, "finish_reason": None}],
    }


def test_completion_offsets_add_up_over_several_plain_pieces():
    e = StreamEncoder("cmpl-1", 1, "m", chat=False, logprobs=True)
    e.feed(TextDelta(0, "ab"))
    e.feed(TextDelta(0, "cde"))
    frame = parse(e.feed(TextDelta(0, "f", [TokenLogprob("f", -1.0)])))[0]
    assert choice(frame)["logprobs"]["text_offset"] == [5]


def test_choices_in_order_are_each_written_at_once_with_their_role():
    e = StreamEncoder("c-1", 1, "m", n=3)
    for i in range(3):
        fs = parse(e.feed(TextDelta(i, f"t{i}")))
        assert [(choice(f)["index"], choice(f)["delta"]) for f in fs] == [
            (i, {"role": "assistant", "content": f"t{i}"})
        ]


def test_a_flushed_choice_gets_its_role_once():
    e = StreamEncoder("c-1", 1, "m", n=2)
    e.feed(TextDelta(1, "b"))
    e.feed(Finish(1, "stop"))
    fs = parse(e.feed(TextDelta(0, "a")))
    assert [choice(f) for f in fs[1:]] == [
        {"index": 1, "delta": {"role": "assistant", "content": "b"}, "finish_reason": None},
        {"index": 1, "delta": {}, "finish_reason": "stop"},
    ]


def test_pending_choices_come_before_the_usage_chunk():
    e = StreamEncoder("c-1", 1, "m", n=2, include_usage=True)
    e.feed(Finish(1, "stop"))
    e.feed(Usage(2, 1))
    fs = parse(e.close())
    assert choice(fs[0])["index"] == 1 and fs[1]["usage"]["total_tokens"] == 3 and fs[2] == "[DONE]"


def test_asking_for_usage_when_none_came_writes_only_done():
    e = StreamEncoder("c-1", 1, "m", include_usage=True)
    e.feed(Finish(0, "stop"))
    fs = parse(e.close())
    assert fs[-1] == "[DONE]" and not any("usage" in f for f in fs[:-1])


def test_a_whole_response_is_written_whole():
    b = ResponseBuilder("chatcmpl-9", 77, "m")
    b.feed(ToolCallDelta(0, 1, "call_b", "second", "{}"))
    b.feed(ToolCallDelta(0, 0, "call_a", None, "{}"))
    b.feed(Finish(0, "tool_calls"))
    assert b.build(Usage(1, 2)) == {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "created": 77,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "tool_calls": [
                        {"id": "call_b", "type": "function", "function": {"name": "second", "arguments": "{}"}},
                        {"id": "call_a", "type": "function", "function": {"name": "", "arguments": "{}"}},
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }


def test_whole_completion_logprobs_count_offsets_from_the_start():
    b = ResponseBuilder("cmpl-9", 77, "m", chat=False, logprobs=True)
    b.feed(TextDelta(0, "ab", [TokenLogprob("a", -1.0), TokenLogprob("b", -2.0)]))
    assert b.build(Usage(1, 2))["choices"][0]["logprobs"]["text_offset"] == [0, 1]


def test_after_a_flush_the_next_choice_in_order_is_written_at_once():
    e = StreamEncoder("c-1", 1, "m", n=3)
    e.feed(TextDelta(1, "b"))
    e.feed(Finish(1, "stop"))
    e.feed(TextDelta(0, "a"))  # flushes choice 1's two frames
    fs = parse(e.feed(TextDelta(2, "c")))
    assert [(choice(f)["index"], choice(f)["delta"]) for f in fs] == [(2, {"role": "assistant", "content": "c"})]


def test_each_pending_choice_written_at_the_end_gets_its_own_role():
    e = StreamEncoder("c-1", 1, "m", n=3)
    e.feed(TextDelta(2, "c"))
    e.feed(TextDelta(1, "b"))
    fs = [f for f in parse(e.close()) if f != "[DONE]"]
    assert [(choice(f)["index"], choice(f)["delta"]) for f in fs] == [
        (1, {"role": "assistant", "content": "b"}),
        (2, {"role": "assistant", "content": "c"}),
    ]


def test_a_chunk_is_the_head_its_one_choice_and_the_tail_dumped_as_one_object():
    """A chunk's bytes are built from the head's and the tail's, dumped once: they must
    be exactly the whole object's (keys in OpenAI's order, compact, usage last)."""
    for chat in (True, False):
        for include_usage in (True, False):
            for fingerprint in (None, "fp_1"):
                e = StreamEncoder("id-1", 7, "m", chat=chat, include_usage=include_usage, fingerprint=fingerprint)
                raw = e.feed(TextDelta(0, 'h\u00e9 "q"\n')) + e.feed(Finish(0, "stop"))
                blocks = [b for b in raw.split(b"\n\n") if b]
                assert len(blocks) == 2
                for block in blocks:
                    whole = {
                        "id": "id-1",
                        "object": "chat.completion.chunk" if chat else "text_completion",
                        "created": 7,
                        "model": "m",
                        **({"system_fingerprint": fingerprint} if fingerprint else {}),
                        "choices": orjson.loads(block[6:])["choices"],
                        **({"usage": None} if include_usage else {}),
                    }
                    assert block == b"data: " + orjson.dumps(whole)


def test_a_whole_response_keeps_a_finish_or_logprobs_that_come_before_any_text():
    """A choice's first event may be its finish (an empty answer cut by length) or a
    logprobs-only piece: either makes the choice, and is kept in it."""
    b = ResponseBuilder("id", 1, "m", n=2, logprobs=True)
    b.feed(Finish(0, "length"))
    b.feed(LogprobsDelta(1, [TokenLogprob("x", -0.5)]))
    b.feed(Finish(1, "content_filter"))
    choices = b.build(Usage(1, 1))["choices"]
    assert [c["finish_reason"] for c in choices] == ["length", "content_filter"]
    assert [(t["token"], t["logprob"]) for t in choices[1]["logprobs"]["content"]] == [("x", -0.5)]
    assert choices[0]["logprobs"] == {"content": [], "refusal": None}
