"""Judging our bytes with the official `openai` package's own models and client."""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import openai
import orjson
from openai.types.responses import Response, ResponseStreamEvent

EVENT_CLASSES: dict[str, Any] = {
    typing.get_args(cls.model_fields["type"].annotation)[0]: cls
    for cls in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}


def validate_response(obj: dict[str, Any]) -> Response:
    """`obj` parsed by the official `Response` model (pydantic validation, not construction)."""
    return Response.model_validate(obj)


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    """Our SSE bytes -> event payloads, checking the framing and validating each
    payload with the official class for its type."""
    out = []
    assert raw.endswith(b"\n\n"), raw[-100:]
    for block in raw[:-2].split(b"\n\n"):
        event_line, data_line = block.split(b"\n")
        assert event_line.startswith(b"event: ") and data_line.startswith(b"data: "), block
        payload = orjson.loads(data_line[6:])
        assert payload["type"] == event_line[7:].decode()
        EVENT_CLASSES[payload["type"]].model_validate(payload)
        out.append(payload)
    return out


def official_client(handler: Callable[[httpx2.Request], Awaitable[httpx2.Response]]) -> openai.AsyncOpenAI:
    """The official async client, strict validation on, talking to `handler` in process."""
    return openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="http://gateway.test/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
        _strict_response_validation=True,
        max_retries=0,
    )


def message_item_events(deltas: int = 1) -> list[str]:
    """The stream event types of one assistant message output item whose single text
    part arrives in `deltas` deltas, in the order the Responses stream sends them."""
    return [
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
