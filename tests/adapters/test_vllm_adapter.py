"""VLLMDialect against recorded vLLM wire samples (docs/runtimes.md §1.3-1.10), replayed
byte for byte by a real server process."""

from __future__ import annotations

import asyncio
import logging

from adapters.base import ErrorEvent, Finish, GenerationRequest, SamplingParams, TextDelta, ToolCallDelta, Usage
from adapters.http_adapter import HTTPAdapter
from adapters.vllm import VLLMDialect, translate_guided
from tests.adapters.wire_samples import (
    chat,
    collect,
    collect_closed,
    collect_refusal,
    json_response,
    sse,
    sse_stream,
)

ID = "chatcmpl-0123456789abcdef"


def adapter(replay, **options) -> HTTPAdapter:
    return HTTPAdapter(VLLMDialect, "vllm-a", replay.url, "tiny", options=options)


def chunk(delta: dict, finish=None, **extra) -> dict:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None:
        choice.update(stop_reason=None, token_ids=None, weight_versions=None)
    return {
        "id": ID,
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "tiny",
        "choices": [choice],
        "kv_transfer_params": None,
        **extra,
    }


ROLE = {
    "id": ID,
    "object": "chat.completion.chunk",
    "created": 1700000000,
    "model": "tiny",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
    "prompt_token_ids": None,
    "prompt_text": None,
}
USAGE = {
    "id": ID,
    "object": "chat.completion.chunk",
    "created": 1700000000,
    "model": "tiny",
    "choices": [],
    "usage": {"prompt_tokens": 12, "total_tokens": 15, "completion_tokens": 3},
}

NON_STREAM = {
    "id": ID,
    "object": "chat.completion",
    "created": 1700000000,
    "model": "tiny",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hi!",
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "reasoning": None,
            },
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": None,
            "token_ids": None,
            "routed_experts": None,
            "weight_versions": None,
        }
    ],
    "service_tier": None,
    "system_fingerprint": "vllm-0.33.0-abcdef12",
    "usage": {
        "prompt_tokens": 12,
        "total_tokens": 15,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 8, "created_cache_tokens": 0, "multimodal_tokens": None},
        "completion_tokens_details": None,
    },
    "prompt_logprobs": None,
    "prompt_token_ids": None,
    "prompt_text": None,
    "kv_transfer_params": None,
    "ec_transfer_params": None,
    "metrics": None,
}


async def test_stream_text_finish_and_usage(replay):
    replay.reply(
        sse_stream(
            ROLE,
            chunk({"content": "Hi"}, token_ids=None),
            chunk({"content": "!"}),
            chunk({"content": ""}, "stop", system_fingerprint="vllm-0.33.0-x"),
            USAGE,
            "[DONE]",
        )
    )
    events = await collect_closed(adapter(replay), chat())
    assert events == [TextDelta(0, "Hi"), TextDelta(0, "!"), Finish(0, "stop"), Usage(12, 3)]
    body = replay.bodies("/v1/chat/completions")[0]
    assert body["model"] == "tiny" and body["stream_options"] == {"include_usage": True}


async def test_non_stream_with_cached_tokens(replay):
    replay.reply(json_response(200, NON_STREAM))
    a = adapter(replay, prompt_tokens_details=True)
    events = await collect_closed(a, chat(stream=False))
    assert events == [TextDelta(0, "Hi!"), Finish(0, "stop"), Usage(12, 3, 8)]
    assert a.capabilities.cached_tokens and not adapter(replay).capabilities.cached_tokens


async def test_tool_call_stream_hermes_shape(replay):
    replay.reply(
        sse_stream(
            ROLE,
            chunk(
                {
                    "tool_calls": [
                        {
                            "id": "chatcmpl-tool-0123456789abcdef",
                            "type": "function",
                            "index": 0,
                            "function": {"name": "get_weather"},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            chunk({"content": ""}, "tool_calls"),
            USAGE,
            "[DONE]",
        )
    )
    events = await collect_closed(
        adapter(replay), chat(tools=[{"type": "function", "function": {"name": "get_weather"}}])
    )
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls[0].id == "chatcmpl-tool-0123456789abcdef" and calls[0].name == "get_weather"
    assert "".join(c.arguments for c in calls) == '{"city": "Paris"}'
    assert Finish(0, "tool_calls") in events


async def test_in_stream_error_then_done(replay):
    replay.reply(
        sse_stream(
            ROLE,
            chunk({"content": "Hi"}),
            {
                "error": {
                    "message": "engine failed",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                }
            },
            "[DONE]",
        )
    )
    events = await collect_closed(adapter(replay), chat())
    assert events[0] == TextDelta(0, "Hi")
    assert isinstance(events[-1], ErrorEvent) and events[-1].error.status == 502
    assert not any(isinstance(e, Finish) for e in events)


async def test_abort_finish_reason_is_an_error(replay):
    replay.reply(sse_stream(ROLE, chunk({"content": "Hi"}), chunk({"content": ""}, "abort"), "[DONE]"))
    events = await collect_closed(adapter(replay), chat())
    assert isinstance(events[-1], ErrorEvent) and "abort" in events[-1].error.message


async def test_repetition_finish_is_stop(replay):
    replay.reply(sse_stream(ROLE, chunk({"content": "la la"}, "repetition"), "[DONE]"))
    events = await collect_closed(adapter(replay), chat())
    assert events == [TextDelta(0, "la la"), Finish(0, "stop")]


async def test_stream_cut_without_done_is_an_error_event(replay):
    replay.reply({"status": 200, "frames": [sse(ROLE), sse(chunk({"content": "Hi"}))], "cut": True})
    events = await collect_closed(adapter(replay), chat())
    assert events[0] == TextDelta(0, "Hi") and isinstance(events[-1], ErrorEvent)


async def test_context_length_before_the_stream(replay):
    replay.reply(
        json_response(
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 1024 tokens. However, your prompt contains 2000 input "
                    "tokens, which exceeds this limit even without any output tokens.",
                    "type": "BadRequestError",
                    "param": "input_tokens",
                    "code": 400,
                }
            },
        )
    )
    exc = await collect_refusal(adapter(replay), chat())
    assert (exc.status, exc.code) == (400, "context_length_exceeded")


def test_guided_fields_move_to_structured_outputs():
    body = {
        "guided_json": {"type": "object"},
        "guided_decoding_backend": "xgrammar",
        "guided_whitespace_pattern": " ",
        "temperature": 0,
    }
    translate_guided(body)
    assert body == {"structured_outputs": {"json": {"type": "object"}, "whitespace_pattern": " "}, "temperature": 0}


async def test_guided_choice_reaches_the_wire_translated(replay):
    replay.reply(json_response(200, NON_STREAM))
    a = adapter(replay)
    await collect(a, chat(stream=False, extra={"guided_choice": ["yes", "no"]}))
    legacy = adapter(replay, legacy_guided=True)
    await collect(legacy, chat(stream=False, extra={"guided_choice": ["yes", "no"]}))
    await a.aclose()
    await legacy.aclose()
    new, old = replay.bodies("/v1/chat/completions")
    assert new["structured_outputs"] == {"choice": ["yes", "no"]} and "guided_choice" not in new
    assert old["guided_choice"] == ["yes", "no"] and "structured_outputs" not in old


METRICS = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 4.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 9.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.42
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} %s
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} %s
"""


async def test_load_from_prometheus_and_prefix_rate_between_reads(replay):
    replay.reply(
        {"status": 200, "body": METRICS % (100, 25)},
        {"status": 200, "body": METRICS % (200, 115)},
        route="GET /metrics",
    )
    a = adapter(replay)
    first = await a.load()
    second = await a.load()
    await a.aclose()
    assert (first.running, first.waiting, first.kv_usage) == (4, 9, 0.42)
    assert first.prefix_hit_rate == 0.25
    assert second.prefix_hit_rate == 0.9  # (115-25)/(200-100): the traffic since the last read
    assert second.read_at >= first.read_at > 0


async def test_health_ready_dead_and_refused(replay):
    replay.reply({"status": 200, "body": ""}, {"status": 503, "body": ""}, route="GET /health")
    a = adapter(replay)
    assert (await a.health()).ok
    assert not (await a.health()).ok
    await a.aclose()
    from processes import free_port

    down = HTTPAdapter(VLLMDialect, "down", f"http://127.0.0.1:{free_port()}", "tiny")
    h = await down.health()
    await down.aclose()
    assert not h.ok and "loading" in h.detail


async def test_closing_the_stream_closes_the_connection(replay):
    replay.reply({"status": 200, "frames": [sse(ROLE), sse(chunk({"content": "a"}))], "hold_ms": 3000})
    a = adapter(replay)
    gen = a.generate(chat(sampling=SamplingParams(max_tokens=5)))
    assert await gen.__anext__() == TextDelta(0, "a")
    await gen.aclose()
    for _ in range(50):
        if replay.recorded()["disconnects"] == 1:
            break
        await asyncio.sleep(0.05)
    await a.aclose()
    assert replay.recorded()["disconnects"] == 1


ABORT = "/inference/v1/abort_requests"


def held_stream() -> dict:
    """A stream that stays open long enough for the client to leave."""
    return {"status": 200, "frames": [sse(ROLE), sse(chunk({"content": "a"}))], "hold_ms": 3000}


async def leave_after_first_text(a: HTTPAdapter, request: GenerationRequest) -> None:
    gen = a.generate(request)
    assert await gen.__anext__() == TextDelta(0, "a")
    await gen.aclose()
    await a.aclose()  # waits for the abort call


async def test_client_gone_aborts_vllms_id_of_the_chat(replay):
    replay.script({"POST /v1/chat/completions": [held_stream()], f"POST {ABORT}": [{"status": 200, "body": ""}]})
    a = adapter(replay, explicit_abort=True)
    assert a.capabilities.explicit_abort
    await leave_after_first_text(a, chat(request_id="gw-77", sampling=SamplingParams(n=2)))
    # One external id covers every n > 1 sample.
    assert replay.bodies(ABORT) == [{"request_ids": ["chatcmpl-gw-77"]}]
    assert replay.bodies("/v1/chat/completions")[0]["n"] == 2
    sent = [r for r in replay.recorded()["requests"] if r["path"] == "/v1/chat/completions"]
    assert sent[0]["headers"]["x-request-id"] == "gw-77"  # what vLLM builds its id from


async def test_client_gone_aborts_vllms_id_of_the_completion(replay):
    frames = [sse({"id": "cmpl-gw-78", "choices": [{"index": 0, "text": "a", "finish_reason": None}]})]
    replay.script(
        {
            "POST /v1/completions": [{"status": 200, "frames": frames, "hold_ms": 3000}],
            f"POST {ABORT}": [{"status": 200, "body": ""}],
        }
    )
    a = adapter(replay, explicit_abort=True)
    request = GenerationRequest(request_id="gw-78", model="m", kind="completion", prompt="hi", stream=True)
    await leave_after_first_text(a, request)
    assert replay.bodies(ABORT) == [{"request_ids": ["cmpl-gw-78-0"]}]


async def test_abort_path_is_configurable_for_a_dev_mode_server(replay):
    replay.script({"POST /v1/chat/completions": [held_stream()], "POST /abort_requests": [{"status": 200, "body": ""}]})
    a = adapter(replay, explicit_abort=True, abort_path="/abort_requests")
    await leave_after_first_text(a, chat(request_id="gw-79"))
    assert replay.bodies("/abort_requests") == [{"request_ids": ["chatcmpl-gw-79"]}]
    assert replay.bodies(ABORT) == []


async def test_no_abort_call_without_the_option_or_after_a_finished_stream(replay):
    finished = {"status": 200, "frames": [sse(ROLE), sse(chunk({"content": "a"}, "stop")), sse("[DONE]")]}
    replay.script(
        {"POST /v1/chat/completions": [held_stream(), finished], f"POST {ABORT}": [{"status": 200, "body": ""}]}
    )
    plain = adapter(replay)
    assert not plain.capabilities.explicit_abort
    await leave_after_first_text(plain, chat())
    aborting = adapter(replay, explicit_abort=True)
    await collect(aborting, chat())
    await aborting.aclose()
    assert len(replay.bodies("/v1/chat/completions")) == 2
    assert replay.bodies(ABORT) == []


async def test_a_refused_abort_does_not_reach_the_client(replay, caplog):
    forbidden = {
        "error": {"message": "Scale-out endpoints are disabled.", "type": "PermissionDeniedError", "code": 403}
    }
    replay.script({"POST /v1/chat/completions": [held_stream()], f"POST {ABORT}": [json_response(403, forbidden)]})
    a = adapter(replay, explicit_abort=True)
    with caplog.at_level(logging.WARNING, logger="adapters.transport"):
        await leave_after_first_text(a, chat(request_id="gw-80"))
    assert replay.bodies(ABORT) == [{"request_ids": ["chatcmpl-gw-80"]}]
    assert "--enable-scale-out" in caplog.text


async def test_json_schema_goes_as_response_format_alone(replay):
    # vLLM 0.32 reads whitespace options only from the server's
    # --structured-outputs-config, and a `structured_outputs` object next to
    # response_format that names no constraint is a 400 ("You must use one kind of
    # structured outputs constraint"), so the adapter adds nothing here.
    replay.reply(json_response(200, NON_STREAM))
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"]}
    response_format = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema, "strict": True}}
    await collect_closed(adapter(replay), chat(stream=False, response_format=response_format))
    (body,) = replay.bodies("/v1/chat/completions")
    assert body["response_format"] == response_format
    assert "structured_outputs" not in body
