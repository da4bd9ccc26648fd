"""TGIDialect against TGI wire samples written from docs/runtimes.md §4, for TGI
>= 3.2 and for the older shapes (object arguments, single-object stream delta),
corrected where TGI's own recordings differ (test_recorded_tgi.py replays those)."""

from __future__ import annotations

import json

import pytest

from adapters.base import ErrorEvent, Finish, SamplingParams, TextDelta, ToolCallDelta, Usage
from adapters.errors import GatewayError
from adapters.http_adapter import HTTPAdapter
from adapters.tgi import JSON_OBJECT_REGEX, TGIDialect, parse_tgi_metrics
from simulators.testing import start_simulator
from tests.adapters.wire_samples import (
    chat,
    collect,
    collect_closed,
    collect_refusal,
    delivered,
    delivered_closed,
    json_response,
    refusal,
    sse,
    streamed,
)

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
# Asked for model "tgi", TGI answers with its model id (router/src/server.rs `chat_completions`).
MODEL_ID = "meta-llama/Llama-3.1-8B-Instruct"


def chunk(delta: dict, finish=None) -> dict:
    return {
        "object": "chat.completion.chunk",
        "id": "",
        "created": 1733213355,
        "model": MODEL_ID,
        "system_fingerprint": "3.3.6-dev0-native",
        "choices": [{"index": 0, "delta": {"role": "assistant", **delta}, "logprobs": None, "finish_reason": finish}],
        "usage": None,
    }


def old_piece(arguments: str, finish=None) -> dict:
    """A tool-call piece before 3.2: one object, `id: ""`, no name; every token is one, the EOS
    token's text and the finish included (tests/adapters/recordings/tgi/v3.1/tool_call_stream.json)."""
    call = {"index": 0, "id": "", "type": "function", "function": {"name": None, "arguments": arguments}}
    return chunk({"tool_calls": call}, finish)


USAGE = {
    "object": "chat.completion.chunk",
    "id": "",
    "created": 1733213355,
    "model": MODEL_ID,
    "system_fingerprint": "3.3.6-dev0-native",
    "choices": [],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}


def completion(message: dict, finish: str, prompt: int, generated: int, fingerprint: str = "3.1.0-native") -> dict:
    """A non-streamed chat answer in TGI's layout (`id` empty, `model` as served)."""
    return {
        "object": "chat.completion",
        "id": "",
        "created": 1,
        "model": "tgi",
        "system_fingerprint": fingerprint,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated},
    }


def adapter(replay, **options) -> HTTPAdapter:
    return HTTPAdapter(TGIDialect, "tgi-d", replay.url, "meta-llama/Llama-3.1-8B-Instruct", options=options)


async def test_stream_without_role_chunk(replay):
    replay.reply(
        streamed(
            sse(chunk({"content": "Hi"})),
            sse(chunk({"content": "!"})),
            sse(chunk({"content": ""}, "stop")),
            sse(USAGE),
            sse("[DONE]"),
        )
    )
    events = await collect_closed(adapter(replay), chat())
    assert events == [TextDelta(0, "Hi"), TextDelta(0, "!"), Finish(0, "stop"), Usage(12, 3)]


async def test_stop_sequence_finish_is_stop(replay):
    message = {"role": "assistant", "content": "Hi"}
    replay.reply(json_response(200, completion(message, "stop_sequence", 3, 1, "3.3.6-dev0-native")))
    events = await collect_closed(adapter(replay), chat(stream=False))
    assert events == [TextDelta(0, "Hi"), Finish(0, "stop"), Usage(3, 1)]


async def test_request_rewriting(replay):
    replay.reply(streamed(sse(chunk({"content": ""}, "stop")), sse("[DONE]")))
    a = adapter(replay)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    await collect(
        a,
        chat(
            sampling=SamplingParams(top_p=1.0, repetition_penalty=1.2, stop=["\n"], n=1, temperature=0.5),
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        ),
    )
    await collect(a, chat(sampling=SamplingParams(top_p=0.0)))
    await a.aclose()
    first, second = replay.bodies("/v1/chat/completions")
    assert first["model"] == "tgi"  # any other name would select a LoRA adapter
    assert "top_p" not in first and first["stop"] == ["\n"]
    assert first["presence_penalty"] == pytest.approx(-0.8)  # TGI adds 2.0 back: repetition 1.2
    assert first["response_format"] == {"type": "json", "value": schema}
    assert "n" not in first and "repetition_penalty" not in first
    assert "top_p" not in second and second["temperature"] == 0.0


def test_grammar_translation():
    tgi = TGIDialect("tgi-d")
    assert tgi.grammar({"type": "json_object"}) == {"type": "regex", "value": JSON_OBJECT_REGEX}
    assert tgi.grammar({"type": "text"}) is None


@pytest.mark.parametrize(
    "sampling, param",
    [
        (SamplingParams(presence_penalty=0.5), "presence_penalty"),
        (SamplingParams(logit_bias={5: 1.0}), "logit_bias"),
        (SamplingParams(top_k=40), "top_k"),
        (SamplingParams(ignore_eos=True), "ignore_eos"),
        (SamplingParams(min_tokens=3), "min_tokens"),
        (SamplingParams(stop_token_ids=[2]), "stop_token_ids"),
    ],
)
async def test_what_tgi_cannot_do_is_a_400_naming_tgi(replay, sampling, param):
    replay.script({})
    error = await collect_refusal(adapter(replay), chat(sampling=sampling))
    assert error.status == 400 and error.param == param and "TGI" in error.message
    assert replay.recorded()["requests"] == []  # refused before any call


async def test_presence_penalty_zero_is_fine(replay):
    replay.reply(streamed(sse(chunk({"content": ""}, "stop")), sse("[DONE]")))
    await collect_closed(adapter(replay), chat(sampling=SamplingParams(presence_penalty=0.0)))
    assert "presence_penalty" not in replay.bodies("/v1/chat/completions")[0]  # 0 would mean repetition 2.0


async def test_tool_stream_3_2_counter_ids_and_missing_finish(replay):
    def piece(name, args):
        return chunk(
            {"tool_calls": [{"index": 0, "id": "0", "type": "function", "function": {"name": name, "arguments": args}}]}
        )

    replay.reply(
        streamed(
            sse(piece("get_weather", "{")),
            sse(piece(None, '"city"')),
            sse(piece(None, ': "Paris"')),
            sse(piece(None, "}")),
            sse(USAGE),
            sse("[DONE]"),
        )
    )
    events = await delivered_closed(adapter(replay), chat(tools=TOOLS))
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls[0].id.startswith("call_") and calls[0].name == "get_weather"
    assert all(c.id is None and c.name is None for c in calls[1:])
    assert json.loads("".join(c.arguments for c in calls)) == {"city": "Paris"}
    assert events[-2:] == [Finish(0, "tool_calls"), Usage(12, 3)]


async def test_tool_stream_before_3_2_single_object_raw_grammar(replay):
    text = ['{"', "function", '": {"', "_name", '": "', "get_weather", '", "', "city", '": "', "Paris", '"}}']
    replay.reply(streamed(*[sse(old_piece(t)) for t in text], sse(old_piece("<|eot_id|>", "stop")), sse("[DONE]")))
    events = await delivered_closed(adapter(replay), chat(tools=TOOLS))
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].id.startswith("call_")
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    assert events[-1] == Finish(0, "tool_calls")


async def test_old_stream_choosing_no_tool_is_text(replay):
    body = '{"function": {"_name": "no_tool", "content": "It is sunny."}}'
    replay.reply(streamed(sse(old_piece(body)), sse(old_piece("<|eot_id|>", "stop")), sse("[DONE]")))
    events = await collect_closed(adapter(replay), chat(tools=TOOLS))
    assert events == [TextDelta(0, "It is sunny."), Finish(0, "stop")]


async def test_unreadable_old_tool_stream_is_an_error(replay):
    replay.reply(streamed(sse(old_piece('{"function": {"_na')), sse(chunk({"content": ""}, "length")), sse("[DONE]")))
    a = adapter(replay)
    with pytest.raises(GatewayError) as info:  # nothing else came: raised, not an event
        await delivered(a, chat(tools=TOOLS))
    await a.aclose()
    assert info.value.status == 502


@pytest.mark.parametrize(
    "arguments", [{"city": "Paris"}, {"_name": "get_weather", "city": "Paris"}, '{"city":"Paris"}']
)
async def test_non_stream_tool_call_object_or_string_arguments(replay, arguments):
    function = {"description": None, "name": "get_weather", "arguments": arguments}
    message = {"role": "assistant", "tool_calls": [{"id": "0", "type": "function", "function": function}]}
    replay.reply(json_response(200, completion(message, "stop", 10, 5)))
    events = await delivered_closed(adapter(replay), chat(stream=False, tools=TOOLS))
    call = events[0]
    assert isinstance(call, ToolCallDelta) and call.id.startswith("call_") and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert events[1:] == [Finish(0, "tool_calls"), Usage(10, 5)]


async def test_completions_empty_finish_mid_stream_is_not_a_finish(replay):
    def c(text, finish, usage=None):
        return {
            "id": "",
            "object": "text_completion",
            "created": 1,
            "model": "tgi",
            "system_fingerprint": "x",
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
            "usage": usage,
        }

    replay.reply(
        streamed(
            sse(c("a", "")),
            sse(c("b", "")),
            sse(c("", "eos_token", {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4})),
            sse("[DONE]"),
        ),
        route="POST /v1/completions",
    )
    events = await collect_closed(adapter(replay), chat(messages=None, kind="completion", prompt="x"))
    assert events == [TextDelta(0, "a"), TextDelta(0, "b"), Finish(0, "stop"), Usage(2, 2)]


async def test_in_stream_validation_error_with_hardcoded_422(replay):
    # TGI validates inside a 200 stream; before any event it is raised as a 400.
    replay.reply(
        streamed(
            sse(
                {
                    "error": {
                        "message": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. "
                        "Given: 4000 `inputs` tokens and 200 `max_new_tokens`",
                        "http_status_code": 422,
                    }
                }
            ),
            sse("[DONE]"),
        )
    )
    error = await refusal(adapter(replay), chat())
    assert (error.status, error.code) == (400, "context_length_exceeded")


async def test_in_stream_overload_after_text_is_an_error_event(replay):
    replay.reply(
        streamed(
            sse(chunk({"content": "Hi"})),
            sse({"error": {"message": "Model is overloaded", "http_status_code": 422}}),
            sse("[DONE]"),
        )
    )
    events = await collect_closed(adapter(replay), chat())
    assert events[0] == TextDelta(0, "Hi")
    assert isinstance(events[-1], ErrorEvent) and events[-1].error.status == 429


async def test_overloaded_429_before_the_stream(replay):
    replay.reply(json_response(429, {"error": "Model is overloaded", "error_type": "overloaded"}))
    error = await collect_refusal(adapter(replay), chat())
    assert error.status == 429 and error.fails_over


def test_capabilities_make_the_gateway_fan_out_n():
    caps = TGIDialect("tgi-d").capabilities
    assert not caps.n and not caps.parallel_tool_calls and not caps.cached_tokens


def test_tgi_metrics():
    text = (
        "tgi_queue_size 3\ntgi_batch_current_size 5\ntgi_batch_current_max_tokens 2048\n"
        "tgi_batch_max_total_tokens 8192\ntgi_request_count 10\n"
    )
    snap = parse_tgi_metrics(text, 5.0)
    assert (snap.waiting, snap.running, snap.kv_usage, snap.prefix_hit_rate, snap.read_at) == (3, 5, 0.25, None, 5.0)


# ---- response_format against the TGI simulator, which validates grammars as TGI does -----------


@pytest.fixture(scope="module")
def tgi_sim():
    sim = start_simulator("tgi", model_name="tiny")
    yield sim
    sim.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_json_object_reaches_tgi_as_a_grammar_it_accepts(tgi_sim, stream):
    a = HTTPAdapter(TGIDialect, "tgi-s", tgi_sim.url, "tiny")
    events = await delivered(
        a, chat(stream=stream, response_format={"type": "json_object"}, sampling=SamplingParams(max_tokens=400))
    )
    await a.aclose()
    assert Finish(0, "stop") in events and not any(isinstance(e, ErrorEvent) for e in events), events
    document = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert isinstance(json.loads(document), dict)


async def test_a_schema_tgi_cannot_constrain_is_refused_before_the_call(tgi_sim):
    a = HTTPAdapter(TGIDialect, "tgi-s", tgi_sim.url, "tiny")
    schema = {"type": "array", "items": {"type": "integer"}}
    fmt = {"type": "json_schema", "json_schema": {"name": "ids", "schema": schema}}
    error = await collect_refusal(a, chat(stream=False, response_format=fmt, request_id="gw-array"))
    await a.aclose()
    assert (error.status, error.param, error.code) == (400, "response_format", "unsupported_by_backend")
    sent = [r["headers"].get("x-request-id") for r in tgi_sim.stats()["last_requests"]]
    assert "gw-array" not in sent  # nothing was sent
