"""One admitted request, run as an ASGI response: dispatch, encode, send.

Running the generation inside the response (rather than before returning it)
lets one watcher see the client leave in every phase: while waiting for the
upstream's first event, between stream chunks, and during a non-streamed
answer. When the client leaves, the generation task is cancelled, which closes
the adapter's iterator (aborting the upstream work), and the ticket is released
with the partial usage and the phase it happened in.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from adapters.base import ErrorEvent, GenerationRequest, TextDelta, ToolCallDelta, Usage
from adapters.errors import GatewayError
from gateway.encoder import ResponseBuilder, StreamEncoder
from gateway.requests import estimate_prompt_tokens
from gateway.responses import error_response

if TYPE_CHECKING:
    from gateway.app import Gateway

CONTENT_EVENTS = (TextDelta, ToolCallDelta)
WATCH_AFTER_S = 0.02


@dataclass
class RequestContext:
    request_id: str
    started: float
    chat: bool
    model: str | None = None
    tenant: str | None = None
    stream: bool = False
    ticket: Any = None
    queue_wait: float = 0.0
    upstream_wait: float = 0.0
    ttft: float | None = None
    phase: str = "upstream_headers"
    extra_headers: dict[str, str] = field(default_factory=dict)


class Generation:
    """An ASGI response that runs the generation it answers."""

    def __init__(self, gateway: Gateway, ctx: RequestContext, requests: list[GenerationRequest]) -> None:
        self.gw = gateway
        self.ctx = ctx
        self.requests = requests
        self.first = requests[0]
        ctx.stream = self.first.stream
        self.n = sum(r.sampling.n for r in requests)
        self.created = int(time.time())
        prefix = "chatcmpl-" if ctx.chat else "cmpl-"
        self.response_id = prefix + ctx.request_id.replace("-", "")[:32]
        self.completion_tokens_seen = 0
        self.usage: Usage | None = None
        self.backend: str | None = None
        self.status = 200
        self.error: str | None = None

    def _headers(self, content_type: bytes) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", content_type), (b"x-request-id", self.ctx.request_id.encode())]
        ticket_headers = getattr(self.ctx.ticket, "headers", None) or {}
        for k, v in ticket_headers.items():
            headers.append((k.encode(), str(v).encode()))
        return headers

    async def __call__(self, scope, receive, send) -> None:
        task = asyncio.current_task()
        state = {"done": False, "gone": False}

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if not state["done"]:
                        state["gone"] = True
                        task.cancel()  # type: ignore[union-attr]
                    return

        watchers: list[asyncio.Task] = []

        def start_watching() -> None:
            if not state["done"]:
                watchers.append(asyncio.create_task(watch()))

        # Most answers are over before a client could notice a delay; the watcher
        # task (the only per-request task) starts only once a request has lasted
        # WATCH_AFTER_S, so a disconnect is seen at most that much later.
        timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, start_watching)
        cancelled_phase = None
        clean = False
        try:
            await self._run(send)
            clean = True
        except asyncio.CancelledError:
            if not state["gone"]:
                raise  # the server is shutting down, not the client leaving
            task.uncancel()  # type: ignore[union-attr]
            cancelled_phase = self.ctx.phase
            self.status = 499
            self.error = "client disconnected"
        finally:
            state["done"] = True
            timer.cancel()
            for w in watchers:
                w.cancel()
            usage = self.usage or self._estimated_usage()
            if self.ctx.ticket is not None:
                release = self.ctx.ticket.release(usage, cancelled_phase)
                await (release if clean else asyncio.shield(release))
            self.gw.finish_record(
                self.ctx, self.status, usage, backend=self.backend, error=self.error, cancelled_phase=cancelled_phase
            )

    def _estimated_usage(self) -> Usage | None:
        """When the runtime gave no usage (cut stream, cancelled): what we saw."""
        if self.backend is None and self.completion_tokens_seen == 0:
            return None
        prompt = sum(estimate_prompt_tokens(r) for r in self.requests)
        return Usage(prompt, self.completion_tokens_seen)

    def _set_phase(self, phase: str) -> None:
        if phase == "upstream":
            phase = "upstream_headers" if self.first.stream else "non_streaming"
        self.ctx.phase = phase

    async def _open(self):
        try:
            self.backend, events = await self.gw.dispatcher.open(self.ctx.model, self.requests, self._set_phase)
        except GatewayError as err:
            return None, err
        return events, None

    async def _send_error(self, send, err: GatewayError) -> None:
        self.status = err.status
        self.error = err.message
        resp = error_response(err, self.ctx.request_id)
        for k, v in (getattr(self.ctx.ticket, "headers", None) or {}).items():
            resp.headers[k] = str(v)
        await send({"type": "http.response.start", "status": resp.status_code, "headers": resp.raw_headers})
        await send({"type": "http.response.body", "body": resp.body})

    async def _next(self, events):
        t = time.perf_counter()
        try:
            return await events.__anext__()
        finally:
            self.ctx.upstream_wait += time.perf_counter() - t

    def _saw(self, event) -> None:
        if isinstance(event, CONTENT_EVENTS):
            self.completion_tokens_seen += 1
            now = time.perf_counter()
            if self.ctx.ttft is None:
                self.ctx.ttft = now - self.ctx.started
                m = self.gw.metrics
                m.child(m.ttft, self.ctx.model, self.backend or "-").observe(self.ctx.ttft)
            elif self._last_content is not None:
                m = self.gw.metrics
                m.child(m.itl, self.ctx.model).observe(now - self._last_content)
            self._last_content = now
        elif isinstance(event, Usage):
            self.usage = event

    async def _run(self, send) -> None:
        self._last_content: float | None = None
        gauge = self.gw.metrics.child(self.gw.metrics.inflight, self.ctx.model)
        gauge.inc()
        try:
            self._set_phase("upstream")
            events, err = await self._open()
            if err is not None:
                await self._send_error(send, err)
                return
            try:
                if self.first.stream:
                    await self._stream(events, send)
                else:
                    await self._whole(events, send)
            finally:
                await events.aclose()
        finally:
            gauge.dec()

    async def _stream(self, events, send) -> None:
        self.ctx.phase = "mid_stream"
        enc = StreamEncoder(
            self.response_id,
            self.created,
            self.ctx.model,
            self.n,
            chat=self.ctx.chat,
            include_usage=self.first.include_usage,
            logprobs=self.first.sampling.logprobs,
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": self._headers(b"text/event-stream") + [(b"cache-control", b"no-cache")],
            }
        )
        body = {"type": "http.response.body", "body": b"", "more_body": True}
        while True:
            try:
                event = await self._next(events)
            except StopAsyncIteration:
                break
            self._saw(event)
            if isinstance(event, ErrorEvent):
                self.status, self.error = event.error.status, event.error.message
            frames = enc.feed(event)
            if frames:
                body["body"] = frames
                await send(body)
            if enc.closed:
                break
        if not enc.closed:
            missing = enc.unfinished()
            if missing:
                err = GatewayError(
                    502,
                    f"Backend {self.backend} ended the stream without finishing choice(s) {missing}.",
                    code="upstream_error",
                )
                self.status, self.error = err.status, err.message
                tail = enc.error(err)
            else:
                tail = enc.close()
        else:
            tail = b""
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _whole(self, events, send) -> None:
        self.ctx.phase = "non_streaming"
        builder = ResponseBuilder(
            self.response_id,
            self.created,
            self.ctx.model,
            self.n,
            chat=self.ctx.chat,
            logprobs=self.first.sampling.logprobs,
        )
        try:
            while True:
                try:
                    event = await self._next(events)
                except StopAsyncIteration:
                    break
                self._saw(event)
                builder.feed(event)
            missing = builder.unfinished()
            if missing:
                raise GatewayError(
                    502, f"Backend {self.backend} ended without finishing choice(s) {missing}.", code="upstream_error"
                )
        except GatewayError as err:
            await self._send_error(send, err)
            return
        usage = self.usage or self._estimated_usage() or Usage(0, 0)
        payload = orjson.dumps(builder.build(usage))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": self._headers(b"application/json") + [(b"content-length", str(len(payload)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": payload})
