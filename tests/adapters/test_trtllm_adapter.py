"""TRTLLMDialect against hand-written trtllm-serve wire samples, each read from
TensorRT-LLM's serving code as docs/runtimes.md §3.2-3.10 cites it. TensorRT-LLM's tests
record no answers; what they assert is replayed by test_recorded_trtllm.py, and
runtimes.md §6 lists what rests on source reading only."""

from __future__ import annotations

import asyncio

import orjson

from adapters.base import ErrorEvent, Finish, SamplingParams, TextDelta, ToolCallDelta, Usage
from adapters.http_adapter import HTTPAdapter
from adapters.trtllm import TRTLLMDialect, parse_iteration_stats
from tests.adapters.wire_samples import (
    chat,
    collect,
    collect_closed,
    collect_refusal,
    delivered,
    json_response,
    sse,
    streamed,
)

CID = "chatcmpl-7"


def chunk(delta: dict, finish=None) -> dict:
    choice: dict = {"index": 0, "delta": delta}
    if finish is not None:
        choice["finish_reason"] = finish
    return {"id": CID, "object": "chat.completion.chunk", "created": 1700000000, "model": "m", "choices": [choice]}


ROLE = sse(chunk({"role": "assistant"}), tail=" ")  # the trailing space of the first frame
USAGE = {
    "id": CID,
    "object": "chat.completion.chunk",
    "created": 1700000000,
    "model": "m",
    "choices": [],
    "usage": {
        "prompt_tokens": 12,
        "total_tokens": 15,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 0},
    },
}


def adapter(replay, **options) -> HTTPAdapter:
    return HTTPAdapter(TRTLLMDialect, "trt-c", replay.url, "llama", options=options)


async def test_stream_with_trailing_space_and_reasoning_noise(replay):
    replay.reply(
        streamed(
            ROLE,
            sse(chunk({"content": "Hi", "reasoning_content": ""})),
            sse(chunk({"content": "", "reasoning_content": ""}, "stop")),
            sse(USAGE),
            sse("[DONE]"),
        )
    )
    events = await collect_closed(adapter(replay), chat())
    assert events == [TextDelta(0, "Hi"), Finish(0, "stop"), Usage(12, 3, 0)]


async def test_undeclared_fields_never_reach_trtllm(replay):
    replay.reply(streamed(ROLE, sse(chunk({"content": "x"}, "stop")), sse(USAGE), sse("[DONE]")))
    a = adapter(replay)
    await collect(
        a,
        chat(
            tools=[{"type": "function", "function": {"name": "f"}}],
            parallel_tool_calls=False,
            sampling=SamplingParams(top_k=5, max_tokens=8),
            extra={"store": True, "metadata": {"a": "b"}, "service_tier": "auto", "chat_template_kwargs": {"x": 1}},
        ),
    )
    await a.aclose()
    body = replay.bodies("/v1/chat/completions")[0]
    for forbidden in ("parallel_tool_calls", "store", "metadata", "service_tier"):
        assert forbidden not in body
    assert body["top_k"] == 5 and body["max_tokens"] == 8 and body["chat_template_kwargs"] == {"x": 1}
    assert body["model"] == "llama" and body["stream_options"] == {"include_usage": True}


async def test_parallel_tool_calls_false_is_enforced_by_the_gateway(replay):
    def call(i: int, name: str) -> dict:
        return {
            "id": f"chatcmpl-tool-{i:032x}",
            "type": "function",
            "index": i,
            "function": {"name": name, "arguments": "{}"},
        }

    replay.reply(
        streamed(
            ROLE,
            sse(chunk({"tool_calls": [call(0, "f")]})),
            sse(chunk({"tool_calls": [call(1, "g")]})),
            sse(chunk({"content": ""}, "tool_calls")),
            sse("[DONE]"),
        )
    )
    a = adapter(replay)
    events = await delivered(
        a, chat(tools=[{"type": "function", "function": {"name": "f"}}], parallel_tool_calls=False)
    )
    await a.aclose()
    assert [e.name for e in events if isinstance(e, ToolCallDelta)] == ["f"]


async def test_repeated_type_on_argument_deltas(replay):
    replay.reply(
        streamed(
            ROLE,
            sse(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "id": "chatcmpl-tool-aa",
                                "type": "function",
                                "index": 0,
                                "function": {"name": "f", "arguments": ""},
                            }
                        ]
                    }
                )
            ),
            sse(
                chunk(
                    {
                        "tool_calls": [{"type": "function", "index": 0, "function": {"arguments": '{"a":1}'}}],
                        "content": "",
                        "reasoning_content": "",
                    }
                )
            ),
            sse(chunk({"content": ""}, "tool_calls")),
            sse("[DONE]"),
        )
    )
    a = adapter(replay)
    events = await collect(
        a,
        chat(
            tools=[{"type": "function", "function": {"name": "f"}}],
            tool_choice={"type": "function", "function": {"name": "f"}},
        ),
    )
    await a.aclose()
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(c.id, c.name) for c in calls] == [("chatcmpl-tool-aa", "f"), (None, None)]
    assert events[-1] == Finish(0, "tool_calls")


async def test_chat_failure_cuts_the_connection_without_done(replay):
    replay.reply({"status": 200, "frames": [ROLE, sse(chunk({"content": "Hi"}))], "cut": True})
    events = await collect_closed(adapter(replay), chat())
    assert events[0] == TextDelta(0, "Hi")
    assert isinstance(events[-1], ErrorEvent) and events[-1].error.status == 502


async def test_completions_in_stream_error(replay):
    replay.reply(
        streamed(
            sse(
                {
                    "id": "cmpl-7",
                    "object": "text_completion",
                    "created": 1,
                    "model": "m",
                    "choices": [
                        {
                            "index": 0,
                            "text": "a",
                            "token_ids": None,
                            "logprobs": None,
                            "finish_reason": None,
                            "stop_reason": None,
                            "avg_decoded_tokens_per_iter": None,
                        }
                    ],
                    "usage": None,
                }
            ),
            sse({"error": {"message": "boom", "type": "server_error", "code": None, "param": None}}),
            sse("[DONE]"),
        ),
        route="POST /v1/completions",
    )
    events = await collect_closed(adapter(replay), chat(messages=None, kind="completion", prompt="hello"))
    assert events[0] == TextDelta(0, "a") and isinstance(events[-1], ErrorEvent)
    body = replay.bodies("/v1/completions")[0]
    assert body["prompt"] == "hello" and "messages" not in body


async def test_context_length_json_400_even_for_streams(replay):
    replay.reply(
        json_response(
            400,
            {
                "object": "error",
                "message": "The sum of prompt length (4000.0), query length (0) should not exceed "
                "max_num_tokens (2048)",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
        )
    )
    exc = await collect_refusal(adapter(replay), chat())
    assert exc.code == "context_length_exceeded"


def stats(it: int, active: int, queued: int, used: int, cap: int, hit: float) -> dict:
    return {
        "iter": it,
        "iterLatencyMS": 5.0,
        "numActiveRequests": active,
        "numQueuedRequests": queued,
        "numCompletedRequests": 0,
        "maxNumActiveRequests": 64,
        "gpuMemUsage": 1,
        "kvCacheStats": {
            "maxNumBlocks": cap,
            "freeNumBlocks": cap - used,
            "usedNumBlocks": used,
            "tokensPerBlock": 32,
            "allocTotalBlocks": used,
            "allocNewBlocks": 1,
            "reusedBlocks": 3,
            "missedBlocks": 1,
            "cacheHitRate": hit,
        },
        "inflightBatchingStats": {"numContextRequests": 1, "numGenRequests": active - 1},
    }


def test_iteration_stats_newest_entry_wins():
    snap = parse_iteration_stats([stats(9, 4, 1, 50, 100, 0.75), stats(8, 2, 0, 10, 100, 0.5)], 7.0)
    assert (snap.running, snap.waiting, snap.kv_usage, snap.prefix_hit_rate, snap.read_at) == (4, 1, 0.5, 0.75, 7.0)
    assert parse_iteration_stats([], 7.0) is None


async def test_destructive_json_metrics_one_reader_then_idle(replay):
    replay.reply(
        {"status": 200, "body": orjson.dumps([stats(1, 3, 2, 25, 100, 0.5)]).decode()},
        {"status": 200, "body": "[]"},
        route="GET /metrics",
    )
    a = adapter(replay, metrics_min_interval_s=0.2)
    b = adapter(replay, metrics_min_interval_s=0.2)  # a second adapter on the same server
    first, same = await asyncio.gather(a.load(), b.load())
    assert len(replay.recorded()["requests"]) == 1  # one read served both
    await asyncio.sleep(0.25)
    idle = await a.load()  # no engine iteration since: nothing runs; KV blocks stay as they were
    await a.aclose()
    await b.aclose()
    assert (first.running, first.waiting, first.kv_usage, first.prefix_hit_rate) == (3, 2, 0.25, 0.5)
    assert same == first
    assert (idle.running, idle.waiting, idle.kv_usage) == (0, 0, 0.25) and idle.read_at > first.read_at


async def test_json_metrics_never_seen_is_unknown(replay):
    replay.reply({"status": 200, "body": "[]"}, route="GET /metrics")
    a = adapter(replay)  # this test has its own event loop, so its own reader
    snap = await a.load()
    await a.aclose()
    assert (snap.running, snap.waiting) == (None, None) and snap.read_at > 0


async def test_prometheus_metrics_option(replay):
    replay.reply(
        {
            "status": 200,
            "body": 'trtllm_num_requests_running{model_name="m"} 5\n'
            'trtllm_num_requests_waiting{model_name="m"} 1\n'
            'trtllm_kv_cache_utilization{model_name="m"} 0.6\n'
            'trtllm_kv_cache_hit_rate{model_name="m"} 0.1\n',
        },
        route="GET /prometheus/metrics",
    )
    a = adapter(replay, metrics="prometheus")
    snap = await a.load()
    await a.aclose()
    assert (snap.running, snap.waiting, snap.kv_usage, snap.prefix_hit_rate) == (5, 1, 0.6, 0.1)
