"""The OpenAI wire dialect, unit by unit: finish words into the enum (a failure
raised, never a `stop`), request bodies out, logprobs, usage, tool calls and server-
sent events in. The adapters' replay tests cover whole exchanges; these pin each
rule of adapters/openai_wire.py on its own so that a change to one is caught."""

from __future__ import annotations

import pytest

from adapters.base import (
    Finish,
    GenerationRequest,
    SamplingParams,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
)
from adapters.errors import GatewayError
from adapters.openai_wire import (
    SSEData,
    build_body,
    decode_chat_logprobs,
    decode_chunk,
    decode_completion_logprobs,
    decode_response,
    decode_tool_calls,
    decode_usage,
    normalize_finish,
)

OPENAI_FINISHES = {"stop", "length", "tool_calls", "content_filter"}


@pytest.mark.parametrize(
    "word, expected",
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool_calls"),
        ("content_filter", "content_filter"),
        ("function_call", "tool_calls"),
        ("eos_token", "stop"),
        ("stop_sequence", "stop"),
        ("repetition", "stop"),
        ("", "stop"),
    ],
)
def test_runtime_finish_words_map_into_the_openai_enum(word, expected):
    assert normalize_finish(word, "b") == expected


@pytest.mark.parametrize("word", ["abort", "error", "cancelled"])
def test_an_abort_or_engine_error_is_raised_as_a_502_not_a_finish(word, caplog):
    with pytest.raises(GatewayError) as caught:
        normalize_finish(word, "gpu-7")
    err = caught.value
    assert (err.status, err.code, err.type) == (502, "upstream_error", "server_error")
    assert err.message == f"The backend serving this model ended the generation with finish_reason {word!r}."
    assert "gpu-7" not in err.message
    assert "gpu-7" in caplog.text and word in caplog.text  # the operator's log names the backend


def test_a_missing_finish_reason_is_a_programming_error():
    with pytest.raises(ValueError, match="^no finish reason$"):
        normalize_finish(None, "b")


def test_a_finish_in_a_response_or_chunk_goes_through_the_same_table():
    for word in ("abort", "error"):
        with pytest.raises(GatewayError):
            decode_response({"choices": [{"message": {"content": "x"}, "finish_reason": word}]}, True, "b")
        with pytest.raises(GatewayError):
            decode_chunk({"choices": [{"delta": {}, "finish_reason": word}]}, True, "b")
    chunk = decode_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "eos_token"}]}, True, "b")
    assert chunk == [Finish(0, "stop")]


def chat(**kw) -> GenerationRequest:
    return GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}], **kw)


def test_a_minimal_chat_body_carries_only_what_was_set():
    body = build_body(chat(), None, stream=False)
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}


def test_the_served_model_name_replaces_the_public_one():
    assert build_body(chat(), "served/name", stream=False)["model"] == "served/name"


def test_a_streamed_body_always_asks_for_usage_and_a_whole_one_never_does():
    req = chat(extra={"stream_options": {"include_usage": False}, "user": "u"})
    assert build_body(req, None, stream=True)["stream_options"] == {"include_usage": True}
    whole = build_body(req, None, stream=False)
    assert "stream_options" not in whole and whole["stream"] is False and whole["user"] == "u"
    assert build_body(req, None, stream=True)["stream"] is True


def test_client_request_ids_never_reach_the_runtime():
    body = build_body(chat(extra={"request_id": "theirs", "rid": "theirs", "keep": 1}), None, stream=False)
    assert "request_id" not in body and "rid" not in body and body["keep"] == 1


def test_chat_tools_choice_logprobs_and_format():
    tools = [{"type": "function", "function": {"name": "f"}}]
    req = chat(
        tools=tools,
        tool_choice="required",
        parallel_tool_calls=False,
        response_format={"type": "json_object"},
        sampling=SamplingParams(logprobs=True, top_logprobs=3),
    )
    body = build_body(req, None, stream=False)
    assert body["tools"] == tools and body["parallel_tool_calls"] is False
    assert body["tool_choice"] == "required"
    assert body["logprobs"] is True and body["top_logprobs"] == 3
    assert body["response_format"] == {"type": "json_object"}
    assert "prompt" not in body


def test_a_chat_without_tools_sends_no_parallel_flag():
    body = build_body(chat(tool_choice="none"), None, stream=False)
    assert "tools" not in body and "parallel_tool_calls" not in body and body["tool_choice"] == "none"


def test_a_completion_body_sends_the_prompt_its_logprob_count_and_echo():
    req = GenerationRequest(
        "r", "m", kind="completion", prompt="p", echo=True, sampling=SamplingParams(logprobs=True, top_logprobs=2)
    )
    body = build_body(req, None, stream=False)
    assert body["prompt"] == "p" and body["logprobs"] == 2 and body["echo"] is True
    assert "messages" not in body and "top_logprobs" not in body
    plain = build_body(GenerationRequest("r", "m", kind="completion", prompt="p"), None, stream=False)
    assert "logprobs" not in plain and "echo" not in plain


def test_every_sampling_parameter_set_is_sent_and_none_unset():
    s = SamplingParams(
        temperature=0.5,
        top_p=0.9,
        presence_penalty=0.1,
        frequency_penalty=0.2,
        seed=7,
        top_k=40,
        min_p=0.05,
        repetition_penalty=1.1,
        logit_bias={50256: -100.0},
        n=3,
        stop=["\n"],
        stop_token_ids=[2],
        max_tokens=16,
        min_tokens=4,
        ignore_eos=True,
    )
    body = build_body(chat(sampling=s), None, stream=False)
    expected = {
        "temperature": 0.5,
        "top_p": 0.9,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "seed": 7,
        "top_k": 40,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "logit_bias": {"50256": -100.0},
        "n": 3,
        "stop": ["\n"],
        "stop_token_ids": [2],
        "max_tokens": 16,
        "min_tokens": 4,
        "ignore_eos": True,
    }
    assert {k: body[k] for k in expected} == expected
    bare = build_body(chat(), None, stream=False)
    assert not set(expected) & set(bare)


def test_a_zero_temperature_and_seed_are_sent_not_dropped_as_falsy():
    body = build_body(chat(sampling=SamplingParams(temperature=0.0, seed=0, max_tokens=0)), None, stream=False)
    assert body["temperature"] == 0.0 and body["seed"] == 0 and body["max_tokens"] == 0


def test_chat_logprobs_decode_with_defaults_for_missing_fields():
    lp = {
        "content": [
            {
                "token": "a",
                "logprob": -0.5,
                "bytes": [97],
                "top_logprobs": [{"token": "b", "logprob": -1, "bytes": [98]}],
            },
            {"top_logprobs": [{}]},
        ]
    }
    assert decode_chat_logprobs(lp) == [
        TokenLogprob("a", -0.5, [97], [TopLogprob("b", -1.0, [98])]),
        TokenLogprob("", -9999.0, None, [TopLogprob("", -9999.0, None)]),
    ]
    assert decode_chat_logprobs({"content": [{"token": "c", "logprob": 0, "top_logprobs": None}]}) == [
        TokenLogprob("c", 0.0, None, [])
    ]
    assert decode_chat_logprobs(None) is None
    assert decode_chat_logprobs({"content": None}) is None
    assert decode_chat_logprobs([]) is None


def test_completion_logprobs_decode_in_the_legacy_shape():
    lp = {"tokens": ["a", "b"], "token_logprobs": [None, -0.25], "top_logprobs": [None, {"b": -0.25, "c": -2}]}
    assert decode_completion_logprobs(lp) == [
        TokenLogprob("a", None, None, []),
        TokenLogprob("b", -0.25, None, [TopLogprob("b", -0.25), TopLogprob("c", -2.0)]),
    ]
    bare = decode_completion_logprobs({"tokens": ["x", "y"]})
    assert bare == [TokenLogprob("x", None, None, []), TokenLogprob("y", None, None, [])]
    assert decode_completion_logprobs({"tokens": "x"}) is None
    assert decode_completion_logprobs("x") is None


def test_usage_decodes_with_cached_tokens_and_tolerates_garbage():
    assert decode_usage({"prompt_tokens": 5, "completion_tokens": 2}) == Usage(5, 2, None)
    assert decode_usage({"prompt_tokens": "5", "prompt_tokens_details": {"cached_tokens": 3}}) == Usage(5, 0, 3)
    assert decode_usage({"prompt_tokens": None, "completion_tokens": None}) == Usage(0, 0, None)
    assert decode_usage({"prompt_tokens_details": {"cached_tokens": 0}}) == Usage(0, 0, 0)
    assert decode_usage({"prompt_tokens_details": ["not", "a", "dict"]}) == Usage(0, 0, None)
    assert decode_usage({"prompt_tokens": "many"}) is None
    assert decode_usage({"prompt_tokens": [1]}) is None
    assert decode_usage(None) is None and decode_usage("5") is None


def test_tool_calls_of_a_whole_message_are_numbered_by_position():
    calls = [
        {"id": "c1", "function": {"name": "f", "arguments": '{"a":1}'}, "index": 9},
        "junk",
        {"function": {"name": "g", "arguments": {"b": 2}}},
        {"id": "", "function": {"name": ""}},
    ]
    assert decode_tool_calls(1, calls, whole=True) == [
        ToolCallDelta(1, 0, "c1", "f", '{"a":1}'),
        ToolCallDelta(1, 2, None, "g", '{"b":2}'),
        ToolCallDelta(1, 3, None, None, ""),
    ]
    assert decode_tool_calls(0, None, whole=True) == []


def test_streamed_tool_call_fragments_keep_their_index():
    calls = [{"index": 2, "function": {"arguments": '{"x'}}, {"function": {"arguments": "1}"}}, {"index": None}]
    assert decode_tool_calls(0, calls, whole=False) == [
        ToolCallDelta(0, 2, None, None, '{"x'),
        ToolCallDelta(0, 1, None, None, "1}"),
        ToolCallDelta(0, 0, None, None, ""),
    ]


def test_a_response_becomes_the_events_its_stream_would_have_given():
    payload = {
        "choices": [
            {
                "index": 1,
                "message": {"content": "hi", "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": "{}"}}]},
                "finish_reason": "tool_calls",
            },
            {"message": {"content": ""}, "finish_reason": None},
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    assert decode_response(payload, True, "b") == [
        TextDelta(1, "hi", None),
        ToolCallDelta(1, 0, "t", "f", "{}"),
        Finish(1, "tool_calls"),
        Finish(1, "stop"),  # the second choice: its position, a missing finish read as stop
        Usage(3, 1, None),
    ]


def test_a_completion_response_and_its_logprobs():
    payload = {
        "choices": [
            {"text": "ab", "logprobs": {"tokens": ["a", "b"]}, "finish_reason": "length"},
            {"index": 5, "text": None, "finish_reason": "stop"},
        ]
    }
    events = decode_response(payload, False, "b")
    assert events == [
        TextDelta(0, "ab", [TokenLogprob("a", None, None, []), TokenLogprob("b", None, None, [])]),
        Finish(0, "length"),
        Finish(5, "stop"),
    ]
    assert decode_response({}, False, "b") == []


def test_chunks_give_events_only_for_what_they_carry():
    assert decode_chunk({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}, True, "b") == []
    assert decode_chunk({"choices": [{"delta": {"content": "x"}, "finish_reason": None}]}, True, "b") == [
        TextDelta(0, "x", None)
    ]
    lp = {"content": [{"token": "", "logprob": -1}]}
    assert decode_chunk({"choices": [{"index": 2, "delta": {}, "logprobs": lp}]}, True, "b") == [
        TextDelta(2, "", [TokenLogprob("", -1.0, None, [])])
    ]
    usage_only = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 0}}
    assert decode_chunk(usage_only, True, "b") == [Usage(1, 0, None)]


def test_completion_chunks_and_their_finish():
    got = decode_chunk({"choices": [{"text": "z", "finish_reason": "length"}, {"text": ""}]}, False, "b")
    assert got == [TextDelta(0, "z", None), Finish(0, "length")]
    lp = {"tokens": ["q"], "token_logprobs": [-3]}
    assert decode_chunk({"choices": [{"index": 4, "text": None, "logprobs": lp}]}, False, "b") == [
        TextDelta(4, "", [TokenLogprob("q", -3.0, None, [])])
    ]


async def _collect(*raw: bytes) -> list[bytes]:
    sse = SSEData()
    return [d for chunk in raw for d in sse.feed(chunk)] + sse.end()


async def test_server_sent_events_yield_their_data_fields():
    got = await _collect(
        b": a comment\n",
        b"event: message\r\n",
        b'data: {"a":1}\r\n',
        b"\n",
        b"data:first\n",
        b"data:  second\n",
        b"id: 7\n",
        b"\r\n",
        b"\n",
        b"data: [DONE]",
    )
    assert got == [b'{"a":1}', b"first\n second", b"[DONE]"]


async def test_the_events_are_the_same_however_the_body_is_cut_into_chunks():
    """The data comes from the body's chunks as the socket gave them: a line or an
    event split between two reads, or many events in one, reads the same."""
    body = b': c\r\ndata: {"a":1}\r\n\r\ndata:first\ndata:  second\nid: 7\n\n\ndata: [DONE]\n\n'
    want = [b'{"a":1}', b"first\n second", b"[DONE]"]
    assert await _collect(body) == want
    for cut in range(1, len(body)):
        assert await _collect(body[:cut], body[cut:]) == want, cut
    assert await _collect(*(body[i : i + 1] for i in range(len(body)))) == want


async def test_events_of_one_data_line_read_as_they_would_line_by_line():
    """Runtimes write one `data: ` line per event, and no carriage return: such a body
    is cut at its blank lines, and must read exactly as line by line (an empty data,
    two events in a chunk, an event of two lines, blank lines between events, a last
    event without its blank line), however the chunks cut it."""
    body = b"data: {}\n\ndata: \n\ndata:  y \n\n\n\ndata: a\n\ndata: b\n: c\nid: 1\ndata:d\n\n\ndata: e"
    want = [b"{}", b"", b" y ", b"a", b"b\nd", b"e"]
    assert await _collect(body) == want
    for cut in range(1, len(body)):
        assert await _collect(body[:cut], body[cut:]) == want, cut
    assert await _collect(*(body[i : i + 1] for i in range(len(body)))) == want
    # a carriage return anywhere: line by line, its line ending cut
    assert await _collect(b"data: x\r\n\n", b"data: z\n\n") == [b"x", b"z"]


async def test_an_event_without_data_yields_nothing():
    assert await _collect(b"retry: 10\n", b"\n", b"\n") == []


def test_a_chat_response_keeps_its_logprobs_and_numbers_whole_tool_calls_by_position():
    payload = {
        "choices": [
            {
                "message": {
                    "content": "hi",
                    "tool_calls": [{"index": 7, "id": "t", "function": {"name": "f", "arguments": "{}"}}],
                },
                "logprobs": {"content": [{"token": "hi", "logprob": -0.5}]},
                "finish_reason": "stop",
            }
        ]
    }
    events = decode_response(payload, True, "b")
    assert events[0] == TextDelta(0, "hi", [TokenLogprob("hi", -0.5, None, [])])
    assert events[1] == ToolCallDelta(0, 0, "t", "f", "{}")  # a whole message's calls: by position, not `index`


def test_streamed_tool_calls_keep_their_choice_and_their_own_index():
    chunk = {"choices": [{"index": 1, "delta": {"tool_calls": [{"index": 3, "function": {"arguments": "{"}}]}}]}
    assert decode_chunk(chunk, True, "b") == [ToolCallDelta(1, 3, None, None, "{")]


def test_a_failed_finish_names_the_backend_in_the_log_only(caplog):
    with pytest.raises(GatewayError) as caught:
        decode_chunk({"choices": [{"delta": {}, "finish_reason": "abort"}]}, True, "gpu-9")
    assert "gpu-9" in caplog.text and "gpu-9" not in caught.value.message
    caplog.clear()
    with pytest.raises(GatewayError):
        decode_response({"choices": [{"message": {}, "finish_reason": "error"}]}, True, "gpu-8")
    assert "gpu-8" in caplog.text


async def test_sse_data_keeps_its_own_trailing_characters():
    got = await _collect(b"data: MAX  \r\n", b"\n", b"data: XX\n", b"\n", b"data: a\n", b"data: b")
    assert got == [b"MAX  ", b"XX", b"a\nb"]  # only the line ending is cut; a last event needs no blank line
