"""SGLangDialect against hand-written SGLang wire samples, each read from SGLang's serving
code as docs/runtimes.md §2.2-2.11 cites it. SGLang's tests record no answers; what they
assert is replayed by test_recorded_sglang.py, and runtimes.md §6 lists what rests on
source reading only."""

from __future__ import annotations

import asyncio

from adapters.base import ErrorEvent, Finish, SamplingParams, TextDelta, ToolCallDelta, Usage
from adapters.http_adapter import HTTPAdapter
from adapters.sglang import SGLangDialect, parse_loads
from tests.adapters.wire_samples import (
    SGLANG_QUEUE_FULL,
    chat,
    collect,
    collect_closed,
    json_response,
    refusal,
    sse,
    sse_stream,
)

RID = "0123456789abcdef0123456789abcdef"


def _chunk(delta: dict, finish=None, matched=None) -> dict:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": matched}
    return {
        "id": RID,
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "default",
        "choices": [choice],
    }


def content(delta: dict, finish=None, matched=None) -> dict:
    # msgspec layout: reasoning_content first, None fields omitted, no usage key.
    return _chunk({"reasoning_content": None, **delta}, finish, matched)


def tool_chunk(call: dict) -> dict:
    # pydantic layout: every null present, usage: null.
    delta = {"role": None, "content": None, "reasoning_content": None, "tool_calls": [call]}
    return {**_chunk(delta), "usage": None}


USAGE = {
    "id": RID,
    "object": "chat.completion.chunk",
    "created": 1700000000,
    "model": "default",
    "choices": [],
    "usage": {
        "prompt_tokens": 12,
        "total_tokens": 15,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 4},
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    },
}


def adapter(replay, **options) -> HTTPAdapter:
    return HTTPAdapter(SGLangDialect, "sgl-b", replay.url, "qwen", options=options)


async def test_stream_with_separate_finish_chunk(replay):
    replay.reply(
        sse_stream(
            content({"role": "assistant", "content": ""}),
            content({"content": "Hi"}),
            content({"content": "!"}),
            content({}, "stop", 151645),
            USAGE,
            "[DONE]",
        )
    )
    events = await collect_closed(adapter(replay), chat(request_id="gw-42"))
    assert events == [TextDelta(0, "Hi"), TextDelta(0, "!"), Finish(0, "stop"), Usage(12, 3, 4)]
    body = replay.bodies("/v1/chat/completions")[0]
    assert body["rid"] == "gw-42" and body["model"] == "qwen"


async def test_tool_stream_with_repeated_null_id_and_name(replay):
    replay.reply(
        sse_stream(
            content({"role": "assistant", "content": ""}),
            tool_chunk(
                {
                    "id": "call_0123456789abcdef01234567",
                    "index": 0,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ),
            tool_chunk(
                {
                    "id": None,
                    "index": 0,
                    "type": "function",
                    "function": {"name": None, "arguments": '{"city":'},
                }
            ),
            tool_chunk(
                {
                    "id": None,
                    "index": 0,
                    "type": "function",
                    "function": {"name": None, "arguments": ' "Paris"}'},
                }
            ),
            content({}, "tool_calls"),
            USAGE,
            "[DONE]",
        )
    )
    events = await collect_closed(
        adapter(replay), chat(tools=[{"type": "function", "function": {"name": "get_weather"}}])
    )
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls[0].id == "call_0123456789abcdef01234567"
    assert [c.id for c in calls[1:]] == [None, None] and [c.name for c in calls[1:]] == [None, None]
    assert "".join(c.arguments for c in calls) == '{"city": "Paris"}'
    assert Finish(0, "tool_calls") in events


async def test_named_tool_choice_non_stream(replay):
    replay.reply(
        json_response(
            200,
            {
                "id": RID,
                "object": "chat.completion",
                "created": 1,
                "model": "default",
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": "",
                            "reasoning_content": None,
                            "tool_calls": [
                                {
                                    "id": "call_x",
                                    "index": 0,
                                    "type": "function",
                                    "function": {"name": "f", "arguments": "{}"},
                                }
                            ],
                        },
                        "logprobs": None,
                        "finish_reason": "tool_calls",
                        "matched_stop": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": 5,
                    "total_tokens": 6,
                    "completion_tokens": 1,
                    "prompt_tokens_details": None,
                    "reasoning_tokens": 0,
                    "completion_tokens_details": None,
                },
            },
        )
    )
    a = adapter(replay)
    events = await collect(
        a,
        chat(
            stream=False,
            tools=[{"type": "function", "function": {"name": "f"}}],
            tool_choice={"type": "function", "function": {"name": "f"}},
        ),
    )
    await a.aclose()
    assert events == [ToolCallDelta(0, 0, "call_x", "f", "{}"), Finish(0, "tool_calls"), Usage(5, 1)]


async def test_queue_full_inside_a_200_stream_is_raised_before_any_event(replay):
    # Nothing reached the client yet: raised, the gateway can fail over.
    replay.reply(sse_stream(SGLANG_QUEUE_FULL, "[DONE]"))
    error = await refusal(adapter(replay), chat())
    assert error.status == 503 and error.fails_over


async def test_abort_finish_is_an_error(replay):
    replay.reply(sse_stream(content({"content": "x"}), content({}, "abort"), "[DONE]"))
    events = await collect_closed(adapter(replay), chat())
    assert isinstance(events[-1], ErrorEvent)


async def test_client_gone_calls_abort_request_with_the_rid(replay):
    replay.script(
        {
            "POST /v1/chat/completions": [{"status": 200, "frames": [sse(content({"content": "a"}))], "hold_ms": 3000}],
            "POST /abort_request": [{"status": 200, "body": ""}],
        }
    )
    a = adapter(replay)
    gen = a.generate(chat(request_id="gw-77"))
    assert await gen.__anext__() == TextDelta(0, "a")
    await gen.aclose()
    await a.aclose()
    assert replay.bodies("/abort_request") == [{"rid": "gw-77"}]


async def test_abort_with_n_names_every_sample(replay):
    replay.script(
        {
            "POST /v1/chat/completions": [{"status": 200, "frames": [sse(content({"content": "a"}))], "hold_ms": 3000}],
            "POST /abort_request": [{"status": 200, "body": ""}],
        }
    )
    a = adapter(replay)
    gen = a.generate(chat(request_id="gw-8", sampling=SamplingParams(n=2)))
    await gen.__anext__()
    await gen.aclose()
    await a.aclose()
    assert replay.bodies("/abort_request") == [{"rid": "gw-8_0"}, {"rid": "gw-8_1"}]


async def test_a_finished_stream_sends_no_abort(replay):
    replay.script(
        {
            "POST /v1/chat/completions": [
                {"status": 200, "frames": [sse(content({"content": "a"})), sse(content({}, "stop")), sse("[DONE]")]}
            ],
            "POST /abort_request": [{"status": 200, "body": ""}],
        }
    )
    await collect_closed(adapter(replay), chat())
    assert replay.bodies("/abort_request") == []


LOADS = {
    "timestamp": "2026-01-01T00:00:00",
    "version": "0.5.23",
    "accelerator": "cuda",
    "num_accelerators": 2,
    "loads": [
        {
            "dp_rank": 0,
            "num_running_reqs": 3,
            "num_waiting_reqs": 1,
            "num_used_tokens": 100,
            "max_total_num_tokens": 1000,
            "token_usage": 0.1,
            "gen_throughput": 50.0,
            "cache_hit_rate": 0.5,
            "utilization": 0.3,
        },
        {
            "dp_rank": 1,
            "num_running_reqs": 2,
            "num_waiting_reqs": 4,
            "num_used_tokens": 300,
            "max_total_num_tokens": 1000,
            "token_usage": 0.3,
            "gen_throughput": 40.0,
            "cache_hit_rate": 0.7,
            "utilization": 0.4,
        },
    ],
}


def test_loads_report_summed_over_dp_ranks():
    snap = parse_loads(LOADS, 123.0)
    assert (snap.running, snap.waiting, snap.read_at) == (5, 5, 123.0)
    assert abs(snap.kv_usage - 0.2) < 1e-9 and abs(snap.prefix_hit_rate - 0.6) < 1e-9


async def test_load_falls_back_to_metrics_without_v1_loads(replay):
    replay.script(
        {
            "GET /v1/loads": [{"status": 404, "body": '{"detail":"Not Found"}'}],
            "GET /metrics": [
                {
                    "status": 200,
                    "body": 'sglang:num_running_reqs{model_name="q",tp_rank="0"} 6\n'
                    'sglang:num_queue_reqs{model_name="q",tp_rank="0"} 2\n'
                    'sglang:token_usage{model_name="q",tp_rank="0"} 0.5\n'
                    'sglang:cache_hit_rate{model_name="q",tp_rank="0"} 0.25\n',
                }
            ],
        }
    )
    a = adapter(replay)
    snap = await a.load()
    await a.aclose()
    assert (snap.running, snap.waiting, snap.kv_usage, snap.prefix_hit_rate) == (6, 2, 0.5, 0.25)


async def test_health_waits_for_the_slow_generation_check(replay):
    replay.reply({"status": 503, "body": ""}, {"status": 200, "frames": [], "hold_ms": 1200}, route="GET /health")
    a = adapter(replay)
    warming = await a.health()
    started = asyncio.get_running_loop().time()
    ready = await a.health()
    took = asyncio.get_running_loop().time() - started
    await a.aclose()
    assert not warming.ok and "503" in warming.detail
    assert ready.ok and took >= 1.0
