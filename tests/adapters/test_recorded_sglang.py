"""SGLangDialect against what SGLang's own test suite asserts about its answers (see recorded.py)."""

from __future__ import annotations

import json

from adapters.base import Finish, TextDelta, ToolCallDelta, Usage
from adapters.http_adapter import HTTPAdapter
from adapters.sglang import SGLangDialect
from tests.adapters.recorded import Recording, assert_every_recording_cites_its_test, load, scripted
from tests.adapters.wire_samples import chat, collect, collect_refusal, delivered_closed, json_response

RUNTIME = "sglang"


def recording(name: str) -> Recording:
    return load(RUNTIME, name)


def serve(replay, rec: Recording, **options) -> HTTPAdapter:
    return HTTPAdapter(SGLangDialect, "sgl-r", scripted(replay, rec), "test_model_name", options=options)


def asked(rec: Recording, **extra) -> object:
    body = rec.request["body"]
    return chat(stream=bool(body.get("stream")), messages=body["messages"], **extra)


def test_every_recording_names_its_source() -> None:
    assert_every_recording_cites_its_test(RUNTIME, "sgl-project/sglang", "test/")


async def test_prompt_beyond_the_context(replay) -> None:
    # test_request_length_validation.py::test_input_length_longer_than_context_length
    for name in ("context_length", "context_length_stream"):  # a stream is refused before it starts
        rec = recording(name)
        error = await collect_refusal(serve(replay, rec), asked(rec))
        assert (error.status, error.code, error.param) == (400, "context_length_exceeded", "messages"), name
        for fragment in rec.source["asserted"]["message_contains"]:
            assert fragment in error.message, name


async def test_max_completion_tokens_above_the_context(replay) -> None:
    rec = recording("max_completion_tokens")  # test_request_length_validation.py::test_max_tokens_validation
    error = await collect_refusal(serve(replay, rec), asked(rec))
    assert (error.status, error.code) == (400, "context_length_exceeded")
    assert "max_completion_tokens is too large" in error.message


async def test_unknown_model_is_the_deployments_fault(replay) -> None:
    rec = recording("unknown_model")  # test_strict_model_validation.py::test_invalid_model_name_chat
    error = await collect_refusal(serve(replay, rec), asked(rec))
    # The gateway sent the configured served model: another backend may serve it.
    assert (error.status, error.code, error.fails_over) == (502, "upstream_error", True)
    assert "does not serve the configured model" in error.message and "SGLang" in error.message
    # The hostile neighbour: any other flat 400 stays the client's mistake.
    other = {**rec.response, "message": "Tool 'x' not found in tools list."}
    replay.reply(json_response(400, other))
    plain = await collect_refusal(HTTPAdapter(SGLangDialect, "sgl-r", replay.url, "m"), asked(rec))
    assert (plain.status, plain.code, plain.fails_over) == (400, None, False)
    assert plain.message == "Tool 'x' not found in tools list."


def test_late_tool_arguments_are_a_piece_without_finish() -> None:
    rec = recording("tool_args_remainder")  # test_serving_chat.py::test_unstreamed_tool_args_completion
    a = SGLangDialect("sgl-r", "m")
    events = [e for chunk in rec.chunks for e in a.decode_chunk(chunk, chat=True)]
    assert events == [ToolCallDelta(0, 0, None, None, ', "unit": "celsius"}')]  # id and name null: no new call


async def test_kimi_tool_call_ids_never_reach_the_client(replay) -> None:
    rec = recording("kimi_tool_call")  # test_serving_chat.py::test_kimi_k2_non_streaming_tool_call_id_format
    tools = rec.request["body"]["tools"]
    events = await delivered_closed(serve(replay, rec), asked(rec, tools=tools))
    call = events[0]
    assert isinstance(call, ToolCallDelta) and call.name == rec.source["asserted"]["name"]
    assert call.id is not None and call.id.startswith("call_") and call.id != rec.source["asserted"]["tool_call_id"]
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert events[1:] == [Finish(0, "tool_calls"), Usage(10, 12)]


async def test_top_level_reasoning_tokens_are_not_counted_twice(replay) -> None:
    rec = recording("usage_reasoning_tokens")  # test_usage_tokens.py::test_chat_api_non_streaming
    a = serve(replay, rec)
    events = await collect(a, asked(rec))
    await a.aclose()
    usage = rec.response["usage"]
    assert usage["reasoning_tokens"] > 0  # what the test asserts
    assert events == [TextDelta(0, "4"), Finish(0, "stop"), Usage(12, 21)]  # completion_tokens include reasoning


async def test_cached_tokens_of_a_repeated_prompt(replay) -> None:
    rec = recording("cached_tokens")  # test_cache_report.py::test_cache_salt_effectiveness
    a = serve(replay, rec, cache_report=True)
    events = await collect(a, asked(rec))
    await a.aclose()
    assert events[-1] == Usage(43, 8, 42) and events[-1].cached_tokens == events[-1].prompt_tokens - 1
