"""What every route does with a request before its own work: name it, read its
body within the size limit. One copy, so the generation routes and the calls that
generate nothing (gateway/serving/oneshot.py) cannot drift apart on a rule a tenant relies on."""

from __future__ import annotations

import os
import re

from starlette.requests import ClientDisconnect, Request

from adapters.errors import GatewayError

# A client's x-request-id is kept for the logs and the response header when it
# is this shape; otherwise the gateway's own id stands in for it.
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def new_request_id() -> str:
    """The gateway's id for one request: 128 random bits (32 hex characters), so
    it can be neither guessed nor repeated. It names the request's generations
    upstream (SGLang's rid, vLLM's request id, the native engine's sequences), so
    one tenant cannot reach another's generation by naming it (an abort by id)."""
    return os.urandom(16).hex()


def client_request_id(value: str | None) -> str | None:
    """The client's x-request-id if it is 1-128 characters of [A-Za-z0-9._:-]; it
    goes to the logs, the traces and the response header, never upstream."""
    return value if value is not None and _CLIENT_ID.fullmatch(value) else None


def head_fields(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The request's header fields by (ASGI's lower-case) name; of a repeated one the
    first, as Starlette's `Headers.get` reads it. One pass, where each `Headers` lookup
    scans the whole head again."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in reversed(raw)}


async def read_body(request: Request, declared: str | None, limit: int) -> bytes:
    """The body, or 413 as soon as it is known to exceed `limit` bytes (from the
    `declared` content-length, or while reading: a client may lie or send chunked);
    ClientDisconnect if the client leaves first. Read from the ASGI messages, not
    Starlette's `Request.stream()`: an async generator per request costs more than the
    read (its hooks, its frames), and a body mostly comes in one message."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_big(limit)
    receive = request.receive
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_big(limit)
        if not message.get("more_body", False):
            if not chunks:
                return chunk
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)


def _too_big(limit: int) -> GatewayError:
    return GatewayError(
        413, f"The request body is larger than this gateway accepts ({limit} bytes).", code="request_too_large"
    )
