"""Raw HTTP against the server under test, recording every exchange.

Bodies are kept as bytes so the strict SSE parser sees exactly what the server
wrote; nothing here is lenient on the server's behalf.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from conformance.sse import SSEParse, parse_sse
from conformance.target import Target


@dataclass(slots=True)
class Exchange:
    method: str
    path: str
    body: Any  # what was sent (a JSON-able value, or raw text for malformed-body checks)
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes = b""
    elapsed_s: float = 0.0
    sse: SSEParse | None = None
    transport_error: str | None = None  # the server closed the connection before the body ended

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return orjson.loads(self.raw)
        except orjson.JSONDecodeError:
            return None

    def request_summary(self) -> dict[str, Any]:
        return {"method": self.method, "path": self.path, "body": self.body}


def encode_json(body: Any) -> bytes:
    """orjson, except for what it refuses (integers beyond 64 bits, which the
    range checks send on purpose)."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body).encode()


class Http:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.client = httpx.AsyncClient(base_url=target.base_url, timeout=httpx.Timeout(target.timeout_s, connect=10.0))
        self.exchanges: list[Exchange] = []

    async def aclose(self) -> None:
        await self.client.aclose()

    def headers(self, api_key: str | None | bool = True) -> dict[str, str]:
        """`api_key=True` uses the target's key, a string uses that key, and
        `None`/`False` sends no Authorization header at all."""
        h = {"content-type": "application/json", **self.target.extra_headers}
        key = self.target.api_key if api_key is True else api_key
        if key:
            h["authorization"] = f"Bearer {key}"
        return h

    def _record(self, ex: Exchange) -> Exchange:
        self.exchanges.append(ex)
        return ex

    async def get(self, path: str, api_key: str | None | bool = True) -> Exchange:
        ex = Exchange("GET", path, None)
        start = time.perf_counter()
        resp = await self.client.get(path, headers=self.headers(api_key))
        ex.status, ex.headers, ex.raw = resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, resp.content
        ex.elapsed_s = time.perf_counter() - start
        return self._record(ex)

    async def post(
        self, path: str, body: Any, *, api_key: str | None | bool = True, raw_body: bytes | None = None
    ) -> Exchange:
        """POST and read the whole body; a streaming answer is parsed too. A
        connection the server drops mid-body is recorded (`transport_error`)
        with the bytes received so far: that is the server's answer, judged by
        the checks, not a reason for the suite to give up."""
        ex = Exchange("POST", path, body if raw_body is None else raw_body.decode("utf-8", "replace"))
        content = raw_body if raw_body is not None else encode_json(body)
        start = time.perf_counter()
        async with self.client.stream("POST", path, content=content, headers=self.headers(api_key)) as resp:
            ex.status, ex.headers = resp.status_code, {k.lower(): v for k, v in resp.headers.items()}
            pieces: list[bytes] = []
            try:
                async for piece in resp.aiter_bytes():
                    pieces.append(piece)
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                ex.transport_error = f"{type(exc).__name__}: {exc}"
            ex.raw = b"".join(pieces)
        ex.elapsed_s = time.perf_counter() - start
        if ex.content_type.startswith("text/event-stream"):
            ex.sse = parse_sse(ex.raw)
        return self._record(ex)

    async def stream_then_drop(self, path: str, body: Any, *, read_chunks: int) -> Exchange:
        """Start a streaming request, read `read_chunks` network chunks, then
        close the connection abruptly (a client going away mid-stream)."""
        ex = Exchange("POST", path, body)
        async with self.client.stream("POST", path, content=encode_json(body), headers=self.headers()) as resp:
            ex.status, ex.headers = resp.status_code, {k.lower(): v for k, v in resp.headers.items()}
            if resp.status_code != 200:
                ex.raw = await resp.aread()
                return self._record(ex)
            seen = 0
            async for piece in resp.aiter_raw():
                ex.raw += piece
                seen += 1
                if seen >= read_chunks:
                    break
        return self._record(ex)
