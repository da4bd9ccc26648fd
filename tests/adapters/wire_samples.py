"""Helpers to write runtime wire samples and to run an adapter to the end."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from adapters.base import Adapter, ErrorEvent, Event, GenerationRequest
from adapters.errors import GatewayError, upstream_failed
from gateway.serving.stream_guard import StreamGuard, guarded

# One function tool as a client sends it (the simulators' scripted tool calls name it).
WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]

# SGLang's answer when its request queue is full (an error object in the stream of a 200).
SGLANG_QUEUE_FULL = {
    "error": {
        "object": "error",
        "message": "The request queue is full.",
        "type": "SERVICE_UNAVAILABLE",
        "param": None,
        "code": 503,
    }
}


def sse(obj: Any, tail: str = "") -> str:
    """One SSE frame as a runtime writes it (`tail` for TRT-LLM's trailing space)."""
    data = obj if isinstance(obj, str) else orjson.dumps(obj).decode()
    return f"data: {data}{tail}\n\n"


def json_response(status: int, obj: Any) -> dict[str, Any]:
    return {"status": status, "body": obj if isinstance(obj, str) else orjson.dumps(obj).decode()}


def streamed(*frames: str, status: int = 200) -> dict[str, Any]:
    """A scripted streaming answer of the replay server: the frames as written."""
    return {"status": status, "frames": list(frames)}


async def collect(adapter: Adapter, request: GenerationRequest) -> list[Event]:
    """The adapter's own events, as it decoded them."""
    return [event async for event in adapter.generate(request)]


async def collect_closed(adapter: Adapter, request: GenerationRequest) -> list[Event]:
    """`collect` for a fresh adapter's one request, then the adapter closed."""
    try:
        return await collect(adapter, request)
    finally:
        await adapter.aclose()


async def delivered_closed(adapter: Adapter, request: GenerationRequest) -> list[Event]:
    """`delivered` for a fresh adapter's one request, then the adapter closed."""
    try:
        return await delivered(adapter, request)
    finally:
        await adapter.aclose()


async def refusal(adapter: Adapter, request: GenerationRequest) -> GatewayError:
    """The error a fresh adapter's one request is answered with before any event (as
    `delivered` raises it), the adapter then closed; fails the test if none is."""
    with pytest.raises(GatewayError) as info:
        await delivered_closed(adapter, request)
    return info.value


async def collect_refusal(adapter: Adapter, request: GenerationRequest) -> GatewayError:
    """The error the adapter itself raises for a fresh adapter's one request, the
    adapter then closed; fails the test if none is."""
    with pytest.raises(GatewayError) as info:
        await collect_closed(adapter, request)
    return info.value


async def delivered(adapter: Adapter, request: GenerationRequest) -> list[Event]:
    """What the encoder gets from this adapter: an error before any event is raised
    (the dispatcher answers it with its own status), the rest under the stream guard."""
    events = adapter.generate(request)
    first = await anext(events, None)
    if first is None:
        raise upstream_failed(adapter.name, "the stream ended before any event")
    if isinstance(first, ErrorEvent):
        await events.aclose()  # type: ignore[attr-defined]
        raise first.error

    async def replay():
        try:
            yield first
            async for event in events:
                yield event
        finally:
            await events.aclose()  # type: ignore[attr-defined]  # as the dispatcher does: abort upstream

    guard = StreamGuard.for_requests([request], adapter.name)
    return [event async for event in guarded(replay(), guard)]


def chat(stream: bool = True, **kw: Any) -> GenerationRequest:
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    return GenerationRequest(request_id=kw.pop("request_id", "req-1"), model="m", stream=stream, **kw)


# A value that asks something of each sampling parameter (adapters/base.py
# SAMPLING_PARAMETERS), for the parameter table's tests.
PARAMETER_VALUES: dict[str, Any] = {
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 40,
    "min_p": 0.1,
    "presence_penalty": 0.5,
    "frequency_penalty": 0.3,
    "repetition_penalty": 1.2,
    "logit_bias": {5: 1.0},
    "seed": 7,
    "n": 2,
    "stop": ["\n"],
    "stop_token_ids": [2],
    "max_tokens": 9,
    "min_tokens": 3,
    "ignore_eos": True,
    "logprobs": True,
}


def parameter_on_the_wire(name: str) -> Any:
    """`PARAMETER_VALUES[name]` as an OpenAI request body carries it (JSON object keys are strings)."""
    return {"logit_bias": {"5": 1.0}}.get(name, PARAMETER_VALUES[name])


def sse_stream(*payloads: Any) -> dict[str, Any]:
    """A scripted streaming answer of the replay server whose frames are `payloads`, each
    written as `data: <payload>` (`sse`): how SGLang and vLLM write every frame."""
    return streamed(*(sse(p) for p in payloads))
