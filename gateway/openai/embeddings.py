"""`POST /v1/embeddings`: OpenAI's request, validated, routed to the model's backends
that embed (`Capabilities.embeddings`), answered in OpenAI's exact shape.

Request (OpenAI's API reference): `model`; `input`, a string, an array of strings, an
array of token ids, or an array of token-id arrays: no empty string or array, at most
2048 items, at most 300,000 tokens in all (token ids counted exactly, text by the
gateway's estimate of four characters a token); `encoding_format` `float` (default) or
`base64`; `dimensions` (at least 1; whether the model can shorten its vectors is the
runtime's call, refused with 400 naming `dimensions`); `user`. Each mistake answers 400
naming the field.

Answer: `{"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
"model": <the tenant's model name>, "usage": {"prompt_tokens", "total_tokens"}}`, the
vectors as floats or as base64 of little-endian float32 (what OpenAI's clients decode).
The prompt tokens are charged to the tenant's token quota like a chat's: the estimate is
reserved at admission, the runtime's count charged at the end.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from starlette.responses import Response

from adapters.base import Adapter, Usage
from adapters.errors import invalid_request, upstream_failed
from adapters.oneshot import EmbeddingRequest, EmbeddingResult
from gateway.intake import Admitted, ApiRoute, Intent
from gateway.openai.request_fields import integer, model_name
from gateway.serving.oneshot import MakeCall, oneshot_parse, route_request

MAX_INPUTS = 2048
MAX_TOTAL_TOKENS = 300_000
MAX_DIMENSIONS = 1 << 16
TOKEN_ID_MAX = 2**31 - 1
_FORMS = "a string, an array of strings, an array of token ids, or an array of token-id arrays"


def parse_embeddings(body: dict[str, Any], request_id: str) -> Intent:
    """The call and whether base64 was asked for (the payload), or a 400 naming the field."""
    model = model_name(body)
    if "input" not in body:
        raise invalid_request(f"'input' is required: {_FORMS}.", param="input")
    items = _inputs(body["input"])
    fmt = body.get("encoding_format")
    if fmt not in (None, "float", "base64"):
        raise invalid_request(f"'encoding_format' must be 'float' or 'base64'; got {fmt!r}.", param="encoding_format")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid_request("'user' must be a string.", param="user")
    estimate = sum(len(item) if isinstance(item, list) else len(item) // 4 + 1 for item in items)
    if estimate > MAX_TOTAL_TOKENS:
        raise invalid_request(
            f"'input' holds about {estimate} tokens; at most {MAX_TOTAL_TOKENS} are accepted in one request.",
            param="input",
        )
    call = EmbeddingRequest(
        request_id=request_id,
        model=model,
        inputs=items,
        dimensions=integer(body, "dimensions", 1, MAX_DIMENSIONS),
        user=user,
    )
    first = items[0]
    routing = route_request(request_id, model, prompt=first if isinstance(first, str) else list(first))
    return Intent([routing], (call, fmt == "base64"), estimate)


def _inputs(value: Any) -> list[str] | list[list[int]]:
    """OpenAI's four `input` forms as a list of items (one string or one token list is one)."""
    if isinstance(value, str):
        if not value:
            raise invalid_request("'input' must not be an empty string.", param="input")
        return [value]
    if not isinstance(value, list) or not value:
        raise invalid_request(f"'input' must be {_FORMS}, and not empty.", param="input")
    if all(_is_token(v) for v in value):
        return [list(value)]
    if len(value) > MAX_INPUTS:
        raise invalid_request(f"'input' may hold at most {MAX_INPUTS} items; got {len(value)}.", param="input")
    if all(isinstance(v, str) for v in value):
        empty = next((i for i, v in enumerate(value) if not v), None)
        if empty is not None:
            raise invalid_request(f"'input[{empty}]' must not be an empty string.", param="input")
        return list(value)
    if all(isinstance(v, list) and v and all(_is_token(t) for t in v) for v in value):
        return [list(v) for v in value]
    raise invalid_request(f"'input' must be {_FORMS}; arrays may not mix them or hold empty items.", param="input")


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= TOKEN_ID_MAX


def embeddings_payload(model: str, result: EmbeddingResult, as_base64: bool, estimate: int) -> tuple[Any, Usage]:
    """OpenAI's answer, and the usage charged: the runtime's count (the estimate when it
    gave none)."""
    tokens = result.prompt_tokens if result.prompt_tokens is not None else estimate
    data = [
        {"object": "embedding", "index": i, "embedding": _base64(vector) if as_base64 else vector}
        for i, vector in enumerate(result.vectors)
    ]
    payload = {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return payload, Usage(tokens, 0)


def _base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def embeddings_route(call: MakeCall) -> ApiRoute:
    """`POST /v1/embeddings`: the front door, then the OneShotCall that answers."""

    def serve(admitted: Admitted) -> Response:
        embed, as_base64 = admitted.intent.payload
        routing = admitted.requests[0]
        embed.tenant, embed.priority = routing.tenant, routing.priority
        estimate = admitted.intent.prompt_estimate or 0

        async def invoke(adapter: Adapter) -> EmbeddingResult:
            result = await adapter.embed(embed)
            if len(result.vectors) != len(embed.inputs):
                raise upstream_failed(adapter.name, "it answered the wrong number of embeddings")
            return result

        def answer(result: EmbeddingResult) -> tuple[Any, Usage]:
            return embeddings_payload(routing.model, result, as_base64, estimate)

        return call(admitted, invoke, answer)

    return ApiRoute("embeddings", oneshot_parse(parse_embeddings), serve, ("embeddings", "embeddings (/v1/embeddings)"))
