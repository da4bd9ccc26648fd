"""TGIDialect's pure parts, each alone: the text pseudo-tools of a non-stream answer,
the raw grammar output of an old stream, `response_format` as a grammar, the
Prometheus gauges, the error classification, and `load()` over the replay server."""

from __future__ import annotations

import json
import re

import pytest

from adapters.base import (
    ErrorEvent,
    Finish,
    GenerationRequest,
    SamplingParams,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
)
from adapters.errors import GatewayError
from adapters.http_adapter import HTTPAdapter
from adapters.runtime_errors import ParsedError
from adapters.tgi import JSON_OBJECT_REGEX, TGIDialect, parse_tgi_metrics
from adapters.tgi_quirks import TGIQuirks, _parse_args, decode_grammar_call, text_tools_to_content


def call(name: str, arguments, **extra) -> dict:
    return {"id": "0", "type": "function", "function": {"name": name, "arguments": arguments}, **extra}


# ---- a non-stream answer's tool calls ----------------------------------------------------


def test_a_chosen_no_tool_becomes_the_text_it_carries():
    message = {"role": "assistant", "tool_calls": [call("no_tool", '{"content": "It is sunny."}')]}
    text_tools_to_content(message)
    assert message == {"role": "assistant", "tool_calls": [], "content": "It is sunny."}
    # notify_error (TGI 2.x) carries its text under "error"; object arguments too.
    message = {"role": "assistant", "content": "Sorry: ", "tool_calls": [call("notify_error", {"error": "no data"})]}
    text_tools_to_content(message)
    assert message == {"role": "assistant", "content": "Sorry: no data", "tool_calls": []}


def test_real_calls_stay_and_lose_only_the_grammar_name():
    weather = call("get_weather", {"_name": "get_weather", "city": "Paris"})
    text = call("no_tool", {"_name": "no_tool", "content": "and some text"})
    message = {"role": "assistant", "tool_calls": [weather, "junk", {"function": "junk"}, text]}
    text_tools_to_content(message)
    assert message["tool_calls"] == [call("get_weather", {"city": "Paris"})]  # unreadable entries dropped
    assert message["content"] == "and some text"


def test_a_text_tool_without_its_field_adds_nothing():
    message = {"role": "assistant", "tool_calls": [call("no_tool", "not json")]}
    text_tools_to_content(message)
    assert message == {"role": "assistant", "tool_calls": [], "content": ""}


def test_arguments_are_read_as_an_object_or_not_at_all():
    assert _parse_args({"a": 1}) == {"a": 1}
    assert _parse_args('{"a": 1}') == {"a": 1}
    assert _parse_args("[1, 2]") == {} and _parse_args("{broken") == {} and _parse_args(None) == {}


# ---- an old stream's raw grammar output --------------------------------------------------


def test_the_grammar_output_gives_the_name_and_the_arguments():
    assert decode_grammar_call('{"function": {"_name": "f", "x": 1}}') == ("f", {"x": 1})
    assert decode_grammar_call('  noise {"_name": "f", "x": [1]} trailing') == ("f", {"x": [1]})  # bare object
    for bad in ("no object", '{"function": {"x": 1}}', '{"function": 3}', '{"_name": 5}', "[1]", "{broken", '"s"'):
        assert decode_grammar_call(bad) is None, bad


# ---- response_format --------------------------------------------------------------------


def grammar(response_format: dict):
    return TGIDialect("tgi-q").grammar(response_format)


def test_a_schema_with_root_properties_becomes_a_json_grammar():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert grammar({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}) == {
        "type": "json",
        "value": schema,
    }
    assert grammar({"type": "text"}) is None


def test_any_object_goes_as_a_regex_tgi_compiles():
    # TGI refuses {"type": "json", "value": {"type": "object"}} ("Grammar must have a
    # 'properties' field"), and {"properties": {}} would allow only `{}`.
    any_object = {"type": "regex", "value": JSON_OBJECT_REGEX}
    assert grammar({"type": "json_object"}) == any_object
    assert grammar({"type": "json_schema", "json_schema": {"name": "x"}}) == any_object  # no schema given
    assert grammar({"type": "json_schema", "json_schema": "junk"}) == any_object
    assert grammar({"type": "json_schema"}) == any_object
    bare = {"type": "object", "title": "Anything", "description": "any object"}
    assert grammar({"type": "json_schema", "json_schema": {"name": "x", "schema": bare}}) == any_object
    every_word = {**bare, "$schema": "https://json-schema.org/draft/2020-12/schema"}  # each key that says nothing
    assert grammar({"type": "json_schema", "json_schema": {"name": "x", "schema": every_word}}) == any_object


@pytest.mark.parametrize(
    "document",
    ["{}", '{"a":1}', '{"a":-1.5e+3,"b":[true,null,"x\\n\\u00e9"],"c":{"d":[false,2]}}', '{"":""}'],
)
def test_the_any_object_regex_accepts_json_objects(document):
    assert isinstance(json.loads(document), dict)
    assert re.fullmatch(JSON_OBJECT_REGEX, document)


@pytest.mark.parametrize(
    "text",
    ["[]", '"a"', "1", "{a:1}", '{"a":}', '{"a":01}', '{"a":1,}', '{"a":"\n"}', '{"a":"\\x"}', '{"a":1} ']
    + ['{"a":{"b":[{"c":1}]}}'],  # nested four containers deep: past the regex's bound
)
def test_the_any_object_regex_refuses_what_is_no_json_object(text):
    assert re.fullmatch(JSON_OBJECT_REGEX, text) is None


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "integer"}},
        {"type": "string"},
        {"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}}, {"type": "null"}]},
        {"type": "object", "additionalProperties": {"type": "integer"}},
        {"type": "object", "required": ["a"]},
    ],
)
def test_a_schema_without_root_properties_is_refused_naming_the_field(schema):
    with pytest.raises(GatewayError) as exc:
        grammar({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    e = exc.value
    assert (e.status, e.param, e.code) == (400, "response_format", "unsupported_by_backend")
    assert e.message == (
        "The backend serving this model runs TGI, which does not support a json_schema whose root has no "
        "`properties` (TGI constrains only objects with declared properties)."
    )


def test_the_capabilities_tools_on_unless_turned_off_and_never_parallel_calls_or_n():
    caps = TGIDialect("tgi-q").capabilities
    assert (caps.tools, caps.parallel_tool_calls, caps.n) == (True, False, False)
    assert TGIDialect("tgi-q", None, {"tools": False}).capabilities.tools is False


# ---- gauges ---------------------------------------------------------------------------


def test_gauges_absent_or_without_a_budget_are_unknown():
    snap = parse_tgi_metrics("tgi_request_count 10\n", 5.0)
    assert (snap.waiting, snap.running, snap.kv_usage, snap.prefix_hit_rate, snap.read_at) == (
        None,
        None,
        None,
        None,
        5.0,
    )
    zero_budget = "tgi_batch_current_max_tokens 100\ntgi_batch_max_total_tokens 0\n"
    assert parse_tgi_metrics(zero_budget, 1.0).kv_usage is None
    over = "tgi_batch_current_max_tokens 9000\ntgi_batch_max_total_tokens 8192\n"
    assert parse_tgi_metrics(over, 1.0).kv_usage == 1.0  # a batch may reserve past the budget: capped


# ---- error classification ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "parsed", "expected"),
    [
        (422, ParsedError("x", type="overloaded"), 429),
        (422, ParsedError("x", type="validation"), 400),
        (424, ParsedError("Request failed"), 500),
        (422, ParsedError("Model is OVERLOADED"), 429),  # a stream error: the message decides
        (422, ParsedError("Incomplete generation"), 500),
        (422, ParsedError("Request failed during generation: boom"), 500),
        (422, ParsedError("Input validation error: bad"), None),
    ],
)
def test_classify_by_type_then_status_then_message(status, parsed, expected):
    assert TGIDialect("t").classify(status, parsed) == expected


# ---- load -------------------------------------------------------------------------------


async def test_load_reads_the_gauges_and_says_when(replay):
    body = (
        "tgi_queue_size 2\ntgi_batch_current_size 3\ntgi_batch_current_max_tokens 100\ntgi_batch_max_total_tokens 400\n"
    )
    replay.reply({"status": 200, "body": body}, {"status": 503, "body": "loading"}, route="GET /metrics")
    a = HTTPAdapter(TGIDialect, "t", replay.url)
    snap = await a.load()
    down = await a.load()
    await a.aclose()
    assert (snap.waiting, snap.running, snap.kv_usage, snap.prefix_hit_rate) == (2, 3, 0.25, None)
    assert snap.read_at > 0 and down.read_at >= snap.read_at
    assert (down.waiting, down.running, down.kv_usage) == (None, None, None)


async def test_load_of_an_unreachable_server_is_unknown():
    a = HTTPAdapter(TGIDialect, "t", "http://127.0.0.1:1")
    snap = await a.load()
    await a.aclose()
    assert (snap.waiting, snap.running, snap.kv_usage) == (None, None, None)


# ---- TGIQuirks: one request's filter ----------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def quirks(stop=(), tools=None) -> TGIQuirks:
    return TGIQuirks(GenerationRequest("r", "m", tools=tools, sampling=SamplingParams(stop=list(stop))), "tgi-q")


def test_the_filter_is_used_only_for_stops_or_tools():
    tgi = TGIDialect("tgi-q")
    assert tgi.event_filter(GenerationRequest("r", "m")) is None
    assert isinstance(tgi.event_filter(GenerationRequest("r", "m", sampling=SamplingParams(stop=["x"]))), TGIQuirks)
    assert isinstance(tgi.event_filter(GenerationRequest("r", "m", tools=TOOLS)), TGIQuirks)


def test_a_stop_sequence_is_trimmed_per_choice():
    q = quirks(stop=["END"])
    out = [*q.feed(TextDelta(0, "abc E")), *q.feed(TextDelta(1, "xyz")), *q.feed(TextDelta(0, "ND tail"))]
    assert out == [TextDelta(0, "abc "), TextDelta(1, "xyz")]  # choice 1 never sees choice 0's held "E"
    # What was held back and turned out not to be a stop is written before the finish.
    q = quirks(stop=["END"])
    assert q.feed(TextDelta(2, "ab E")) == [TextDelta(2, "ab ")]
    assert q.feed(Finish(2, "length")) == [TextDelta(2, "E"), Finish(2, "length")]
    assert q.feed(Finish(3, "stop")) == [Finish(3, "stop")]  # a choice never trimmed


def test_a_held_back_piece_keeps_its_logprobs():
    q = quirks(stop=["END"])
    lp = [TokenLogprob("E", -0.5)]
    assert q.feed(TextDelta(0, "E", lp)) == [TextDelta(0, "", lp)]  # the text waits, the logprobs do not
    assert q.feed(TextDelta(0, "N")) == []


def test_old_grammar_pieces_are_decoded_when_the_choice_finishes():
    q = quirks(tools=TOOLS)
    pieces = [
        '{"function": {"_name": "no_tool", "content": "hi"}}',
        '{"function": {"_name": "get_weather", "city": "Zürich"}}',
    ]
    for tool_index, raw in enumerate(pieces):
        assert q.feed(ToolCallDelta(0, tool_index, None, None, raw)) == []
    assert q.feed(Finish(0, "stop")) == [
        TextDelta(0, "hi"),
        ToolCallDelta(0, 1, None, "get_weather", '{"city": "Zürich"}'),  # after a text tool: not stopped
        Finish(0, "stop"),
    ]
    q = quirks(tools=TOOLS)
    q.feed(ToolCallDelta(1, 0, None, None, '{"function": {"_name": "no_tool"}}'))
    q.feed(ToolCallDelta(0, 0, None, None, '{"function": {"_name": "get_weather"}}'))
    assert q.at_done() == [
        ToolCallDelta(0, 0, None, "get_weather", "{}"),
        TextDelta(1, ""),  # a text tool without its field says nothing
        Finish(0, "stop"),
        Finish(1, "stop"),
    ]


def test_an_unreadable_grammar_piece_is_an_error_naming_what_came(caplog):
    q = quirks(tools=TOOLS)
    q.feed(ToolCallDelta(0, 0, None, None, "x" * 300))
    q.feed(ToolCallDelta(1, 0, None, None, '{"function": {"_name": "get_weather"}}'))
    out = q.at_done()
    assert len(out) == 1 and isinstance(out[0], ErrorEvent)  # stops there: nothing after the error
    expected = "TGI sent a tool call the gateway could not read: " + repr("x" * 200)
    assert out[0].error.message.endswith(expected) and out[0].error.status == 502
    assert any("backend tgi-q failed" in r.getMessage() for r in caplog.records)
    q = quirks(tools=TOOLS)
    q.feed(ToolCallDelta(0, 0, None, None, "junk"))
    (error,) = q.feed(Finish(0, "stop"))
    assert isinstance(error, ErrorEvent)  # no finish after it


def test_a_grammar_call_with_nested_arguments_is_read_from_its_first_brace():
    assert decode_grammar_call('{"function": {"_name": "f", "x": {"y": 1}}}') == ("f", {"x": {"y": 1}})


def test_the_body_says_whether_to_stream():
    tgi = TGIDialect("tgi-q")
    req = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}])
    assert tgi.body(req, True)["stream"] is True and tgi.body(req, False)["stream"] is False


# ---- the request body and what TGI cannot do ------------------------------------------------------


def body_of(request: GenerationRequest, **options) -> dict:
    return TGIDialect("tgi-q", None, options).body(request, False)


def test_the_body_names_the_adapter_and_translates_what_tgi_reads_differently():
    chat_req = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
    assert body_of(chat_req)["model"] == "tgi" and body_of(chat_req, adapter_id="lora-7")["model"] == "lora-7"
    assert "parallel_tool_calls" not in body_of(chat_req)  # TGI has no such field
    completion = GenerationRequest(
        "r", "m", kind="completion", prompt="hi", sampling=SamplingParams(repetition_penalty=1.2)
    )
    body = body_of(completion)
    assert body["repetition_penalty"] == 1.2 and "presence_penalty" not in body  # CompletionRequest has it
    text = GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}], response_format={"type": "text"})
    assert "response_format" not in body_of(text)  # plain text: no grammar at all


@pytest.mark.parametrize(
    ("request_kw", "feature", "param"),
    [
        (
            {"kind": "completion", "prompt": "hi", "sampling": SamplingParams(logprobs=True)},
            "logprobs on /v1/completions",
            "logprobs",
        ),
        ({"kind": "completion", "prompt": "hi", "echo": True}, "echo", "echo"),
        ({"kind": "completion", "prompt": [1, 2, 3]}, "token-id prompts", "prompt"),
        ({"response_format": {"type": "regex"}}, "response_format type 'regex'", "response_format"),
    ],
)
def test_what_tgi_lacks_is_refused_naming_it(request_kw, feature, param):
    request_kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    with pytest.raises(GatewayError) as exc:
        body_of(GenerationRequest("r", "m", **request_kw))
    e = exc.value
    assert (e.status, e.code, e.param) == (400, "unsupported_by_backend", param)
    assert e.message == f"The backend serving this model runs TGI, which does not support {feature}."


def test_chat_logprobs_and_text_formats_are_not_refused():
    chat_req = GenerationRequest(
        "r", "m", messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(logprobs=True)
    )
    assert body_of(chat_req)["logprobs"] is True
    for kind in ("text", "json_object", "json_schema"):
        body_of(
            GenerationRequest("r", "m", messages=[{"role": "user", "content": "hi"}], response_format={"type": kind})
        )


def test_the_adapters_filter_names_its_backend():
    assert TGIDialect("tgi-q").event_filter(GenerationRequest("r", "m", tools=TOOLS)).backend == "tgi-q"


def test_calls_after_a_text_tool_are_kept():
    message = {
        "role": "assistant",
        "tool_calls": [call("no_tool", {"content": "hi"}), call("get_weather", {"city": "Oslo"})],
    }
    text_tools_to_content(message)
    assert message == {"role": "assistant", "content": "hi", "tool_calls": [call("get_weather", {"city": "Oslo"})]}


@pytest.mark.parametrize(
    ("name", "neutral"),
    [
        ("top_k", -1),
        ("min_p", 0.0),
        ("stop_token_ids", []),
        ("min_tokens", 0),
        ("ignore_eos", False),
        ("logit_bias", {}),
    ],
)
def test_a_neutral_value_of_what_tgi_lacks_is_not_sent(name, neutral):
    # Not refused (it asks nothing), and not sent either: TGI's OpenAI API has no such field.
    req = GenerationRequest(
        "r", "m", messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(**{name: neutral})
    )
    assert name not in body_of(req)
