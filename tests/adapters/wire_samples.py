"""Helpers to write runtime wire samples and to run an adapter to the end."""

from __future__ import annotations

from typing import Any

import orjson

from adapters.base import Adapter, Event, GenerationRequest


def sse(obj: Any, tail: str = "") -> str:
    """One SSE frame as a runtime writes it (`tail` for TRT-LLM's trailing space)."""
    data = obj if isinstance(obj, str) else orjson.dumps(obj).decode()
    return f"data: {data}{tail}\n\n"


def json_response(status: int, obj: Any) -> dict[str, Any]:
    return {"status": status, "body": obj if isinstance(obj, str) else orjson.dumps(obj).decode()}


async def collect(adapter: Adapter, request: GenerationRequest) -> list[Event]:
    return [event async for event in adapter.generate(request)]


def chat(stream: bool = True, **kw: Any) -> GenerationRequest:
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    return GenerationRequest(request_id=kw.pop("request_id", "req-1"), model="m", stream=stream, **kw)
