"""Server-sent events as the runtimes write them: `data: <json>\\n\\n` frames, the
`data: [DONE]` terminator, and a writer that can also cut the connection on purpose."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

DONE_FRAME = b"data: [DONE]\n\n"


def frame(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class ClientGone(Exception):
    """The client closed the connection while we were writing."""


class SSEStream:
    """Writes SSE frames. Unpaced generations (no TTFT/ITL) are written in one
    go at the end, paced ones frame by frame, which is what makes the synthetic
    source cheap enough for load tests while slow streams still trickle."""

    def __init__(self, request: web.Request, paced: bool, headers: dict[str, str] | None = None) -> None:
        self.request = request
        self.paced = paced
        self.response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                **(headers or {}),
            },
        )
        self.buffer: list[bytes] = []
        self.prepared = False

    async def start(self) -> None:
        await self.response.prepare(self.request)
        self.prepared = True

    async def send(self, data: bytes) -> None:
        self.buffer.append(data)
        if self.paced:
            await self.flush()

    async def flush(self) -> None:
        if not self.buffer:
            return
        if not self.prepared:
            await self.start()
        data = b"".join(self.buffer)
        self.buffer.clear()
        try:
            await self.response.write(data)
        except (ConnectionResetError, ConnectionError) as exc:
            raise ClientGone() from exc

    async def finish(self) -> web.StreamResponse:
        await self.flush()
        if not self.prepared:
            await self.start()
        try:
            await self.response.write_eof()
        except (ConnectionResetError, ConnectionError) as exc:
            raise ClientGone() from exc
        return self.response

    async def cut(self) -> web.StreamResponse:
        """Close the TCP connection without finishing the HTTP body: the client sees
        a truncated chunked response and no [DONE]."""
        await self.flush()
        transport = self.request.transport
        if transport is not None:
            transport.close()
        return self.response


async def error_stream(
    request: web.Request, events: list[bytes], headers: dict[str, str] | None = None
) -> web.StreamResponse:
    """A stream refused before generation: HTTP 200, then the runtime's error frames."""
    stream = SSEStream(request, paced=False, headers=headers)
    for data in events:
        await stream.send(data)
    return await stream.finish()
