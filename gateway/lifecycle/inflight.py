"""The requests under way on the API routes, each with the config version it started
under: what a drain waits for and ends when its time is up, and what says when a backend
a reload took out is no longer used. Ending ("cutting") a request cancels its task, so
it closes its upstream and releases its ticket as any cancellation; the client reads an
error event and `[DONE]`, or a 503 before the answer (docs/architecture.md, "Lifecycle").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from adapters.errors import GatewayError
from gateway.http.envelope import error_response
from gateway.openai.encoder import sse_error

EVENT_STREAM = b"text/event-stream"


class Exchange:
    """One request under way: its task, its config version, and how far its answer got."""

    __slots__ = ("task", "version", "cut", "on_cut", "started", "streaming", "complete", "_send")

    def __init__(self, task: asyncio.Task, version: int, send) -> None:
        self.task = task
        self.version = version
        self.cut = False
        self.on_cut: Callable[[], None] | None = None  # tells the response, before it is cancelled
        self.started = False  # http.response.start was sent
        self.streaming = False  # ... as a server-sent event stream
        self.complete = False  # the last body part was sent
        self._send = send

    def send(self, message) -> Awaitable[None]:
        """The server's send, noting how far the answer got. Not a coroutine of its
        own: the server's is returned to be awaited (one frame less per message)."""
        kind = message["type"]
        if kind == "http.response.body":
            if not message.get("more_body", False):
                self.complete = True
        elif kind == "http.response.start":
            self.started = True
            for k, v in message["headers"]:  # a loop, not any(): no generator per answer
                if k == b"content-type":
                    self.streaming = v.startswith(EVENT_STREAM)
                    break
        return self._send(message)

    async def end_cut(self, err: GatewayError) -> bool:
        """Answer a cut request with `err`; False when its answer cannot be ended
        cleanly (a non-streamed answer already under way: the connection closes)."""
        if self.complete:
            return True
        if not self.started:
            response = error_response(err)
            await self._send({"type": "http.response.start", "status": err.status, "headers": response.raw_headers})
            await self._send({"type": "http.response.body", "body": response.body})
            return True
        if self.streaming:
            await self._send({"type": "http.response.body", "body": sse_error(err), "more_body": False})
            return True
        return False


class InFlight:
    def __init__(self) -> None:
        self._live: dict[asyncio.Task, Exchange] = {}
        self._emptied = asyncio.Event()

    def __len__(self) -> int:
        return len(self._live)

    def enter(self, version: int, send) -> Exchange:
        task = asyncio.current_task()
        assert task is not None
        exchange = Exchange(task, version, send)
        self._live[task] = exchange
        return exchange

    def leave(self, exchange: Exchange) -> None:
        self._live.pop(exchange.task, None)
        if not self._live:
            self._emptied.set()

    def oldest_version(self) -> int | None:
        """The oldest config version a request under way started with (None: no request)."""
        return min((e.version for e in self._live.values()), default=None)

    async def wait_empty(self, timeout_s: float) -> bool:
        """Until no request is under way (True) or `timeout_s` passed (False)."""
        if not self._live:
            return True
        self._emptied.clear()
        try:
            # not asyncio.wait_for: on 3.11 it drops a cancel that lands as the last request
            # leaves, and a drain cancelled then would carry on as drained
            async with asyncio.timeout(timeout_s):
                await self._emptied.wait()
        except TimeoutError:
            return not self._live
        return True

    async def cut(self, settle_s: float = 5.0) -> int:
        """End every request under way (see the module's docstring); how many there were.
        Waits up to `settle_s` for them to have answered and let go."""
        exchanges = list(self._live.values())
        for exchange in exchanges:
            exchange.cut = True
            if exchange.on_cut is not None:
                exchange.on_cut()
            exchange.task.cancel()
        await self.wait_empty(settle_s)
        return len(exchanges)
